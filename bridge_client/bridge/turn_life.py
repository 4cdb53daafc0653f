"""A turn's life in the bridge, and the exception that ends a driver's run of it."""
from __future__ import annotations

__all__ = ["_Abandoned"]


class _Abandoned(BaseException):
    """Raised into a turn's thread when the bridge shuts down (or its store failed): the turn
    is left unfinished in the store, to be continued after a restart (B05). A BaseException
    so that a driver's ``except Exception`` does not swallow it."""
