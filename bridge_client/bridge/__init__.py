"""The bridge: the server that runs an agent's driver inside the sandbox.

Importing this package is cheap and pulls in no server code: the host imports
``bridge_client.bridge.identity`` from it, and drivers import ``bridge_client.bridge.driver``
(re-exported here: :class:`Driver`, :class:`TurnContext`, :class:`TurnResult`). The server
itself (``server``, ``store``, ``turns``, websockets) is imported only by the bridge program,
``python -m bridge_client.bridge``.
"""
from .driver import Driver, DriverFactory, TurnContext, TurnResult

__all__ = ["Driver", "DriverFactory", "TurnContext", "TurnResult"]
