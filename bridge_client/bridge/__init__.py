"""The bridge: the server that runs an agent's driver inside the sandbox.

Importing this package is cheap and pulls in no server code: drivers import
``bridge_client.bridge.driver`` (re-exported here, on first use: :class:`Driver`,
:class:`TurnContext`, :class:`TurnResult`).
The server itself (``server``, ``store``, ``turns``, websockets) is imported only by the
bridge program, ``python -m bridge_client.bridge``, once it holds its state directory's lock.
"""
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .driver import Driver, DriverFactory, TurnContext, TurnResult

__all__ = ["Driver", "DriverFactory", "TurnContext", "TurnResult"]


def __getattr__(name: str) -> Any:
    """Import the driver interface (PEP 562) on first access; AttributeError for others."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import driver

    value = getattr(driver, name)
    globals()[name] = value
    return value
