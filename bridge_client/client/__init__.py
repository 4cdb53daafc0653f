"""The host side: find or launch the bridge, connect, and read turns (see :doc:`concepts`)."""
from .session import Session
from .turn import Turn

__all__ = ["Session", "Turn"]
