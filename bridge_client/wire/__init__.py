"""The bridge protocol as data: the envelope, the catalogue and the values.

See :doc:`protocol` for the protocol itself.

Sans-I/O: no sockets, no threads, no clocks. Both the host (``bridge_client.client``) and the
bridge (``bridge_client.bridge``) build on it, and it is tested with plain values.
"""
from . import frames, host_parts, parts, rpcs
from .frames import *  # noqa: F401,F403
from .host_parts import *  # noqa: F401,F403
from .parts import *  # noqa: F401,F403
from .rpcs import *  # noqa: F401,F403

__all__ = [*frames.__all__, *parts.__all__, *rpcs.__all__, *host_parts.__all__]
