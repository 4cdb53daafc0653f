"""What the store hands out and takes in: its rows as values, the sinks that receive committed
parts, and its error. No I/O here; the modules beside it (``schema``, ``writer``, ``reads``)
import these."""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple

__all__ = ["StoreError", "Meta", "StoredPart", "StoredSession", "StoredTurn", "PartSink", "SegmentSink"]

Meta = Tuple[Optional[int], int, str]
"""A part's ``(step, attempt, type)``."""


class StoreError(RuntimeError):
    """The store is closed, a write failed (the bridge can no longer store every part before a
    reader sees it), or the file
    is of a layout this bridge does not know."""


class StoredPart(NamedTuple):
    """A part as the log keeps it: its columns and its JSON text (sent as is, never re-encoded)."""

    index: int  # type: ignore[assignment]  # the part's offset; shadows tuple.index on purpose
    step: Optional[int]
    attempt: int
    type: str
    text: str


class StoredSession(NamedTuple):
    """A session row: ``data`` is the driver's JSON (decoded)."""

    session_id: str
    revision: int
    data: Any
    closed: bool


class StoredTurn(NamedTuple):
    """A turn row.

    Attributes:
        status: ``running`` (unfinished: running, or orphaned by a restart) or ``finished``.
        turn_state: the TurnState JSON object. finish: the ``turn-finish`` fields or ``None``.
        checkpoint: the SessionState JSON object as of the last completed step (where a
            restart continues from).
    """

    turn_id: str
    session_id: str
    prompt: str
    status: str
    started_at: str
    turn_state: Dict[str, Any]
    finish: Optional[Dict[str, Any]]
    checkpoint: Dict[str, Any]


class PartSink(Protocol):
    """Receives parts submitted with :func:`~bridge_client.bridge.store.part_op` once they are
    committed. Called from the writer thread; must not block on the store."""

    def publish(self, parts: List[StoredPart]) -> None:
        """Take committed parts, in log order."""
        ...


class SegmentSink(Protocol):
    """Receives the parts of a :class:`~bridge_client.bridge.store.PartBuffer` once they are
    committed (the turn's log). Called from the writer thread; must not block on the store."""

    def publish_segment(self, texts: List[str], metas: List[Meta], marks: List[Meta]) -> None:
        """Take committed parts, in log order.

        Args:
            texts: their JSON texts. metas: their ``(step, attempt, type)``, one per text.
            marks: the metas of those that change how the log reads (``step-reset``,
                ``turn-finish``), in order; usually empty.
        """
        ...

