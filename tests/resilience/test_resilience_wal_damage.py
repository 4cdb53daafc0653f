"""A damaged or cut ``-wal`` after a bridge's SIGKILL mid-turn (issue 27, item 6): SQLite reads
a ``-wal`` up to its first frame whose checksum fails and drops the rest without a word, so
parts that the host had read are gone from the store. The bridge must notice (its record of
what it committed, ``bridge.sqlite3-served``), move the store aside with a new generation
(B10), and a host reading the turn on must see a new ``turn-start`` and the turn run again from
its prompt, never the old log spliced with the new run's."""
from __future__ import annotations

import glob
import logging
import os
import struct

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.wire.parts import TurnStart
from host_support import options, session_options
from resilience_support import sigkill_bridge

pytestmark = pytest.mark.timeout(90)

PROMPT = "one two three four five six seven eight nine ten "
STEPS = 3
ECHO = {"steps": STEPS, "chunks": 30, "delay": 0.01}
WAL_HEADER = 32
FRAME_HEADER = 24


def _frames(wal: str) -> "tuple[int, int]":
    """(page size, number of whole frames) of the -wal ``wal``."""
    with open(wal, "rb") as f:
        header = f.read(WAL_HEADER)
    (page_size,) = struct.unpack(">I", header[8:12])
    size = os.path.getsize(wal)
    return page_size, (size - WAL_HEADER) // (FRAME_HEADER + page_size)


def flip_frame_bytes(wal: str) -> None:
    """Flip bytes in the page of a frame in the second half of the -wal (its checksum fails:
    SQLite drops that frame and every later one)."""
    page_size, frames = _frames(wal)
    assert frames >= 4, f"the -wal holds {frames} frames"
    at = WAL_HEADER + (frames * 2 // 3) * (FRAME_HEADER + page_size) + FRAME_HEADER + page_size // 2
    with open(wal, "r+b") as f:
        f.seek(at)
        data = f.read(64)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


def flip_header_bytes(wal: str) -> None:
    """Flip the -wal header's salt: SQLite then ignores every frame."""
    with open(wal, "r+b") as f:
        f.seek(16)
        data = f.read(8)
        f.seek(16)
        f.write(bytes(b ^ 0xFF for b in data))


def cut_frames(wal: str) -> None:
    """Cut the -wal at a frame boundary, a third of its frames off its end."""
    page_size, frames = _frames(wal)
    assert frames >= 4, f"the -wal holds {frames} frames"
    os.truncate(wal, WAL_HEADER + (frames * 2 // 3) * (FRAME_HEADER + page_size))


@pytest.mark.parametrize(
    "damage", [flip_frame_bytes, flip_header_bytes, cut_frames], ids=["frame-bytes", "header", "cut"]
)
def test_b10_a_damaged_wal_mid_turn_gives_a_new_generation_and_the_turn_runs_again(sandbox, caplog, damage):
    opts = options("echo", agent_options=ECHO)
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        before = []
        for part in turn:
            before.append(part)
            if part.index == 45:  # mid step 1: step 0's parts were read
                break
        generation = turn.state.generation
        assert generation is not None
        sigkill_bridge(sandbox, session.bridge_id)
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        store = os.path.join(state_dir, identity.STORE_FILE)
        damage(store + "-wal")
        with caplog.at_level(logging.WARNING, logger="bridge_client"):
            after = list(turn)
        assert session._hello.generation not in (None, generation), "a new generation (B10)"
        starts = [p for p in after if isinstance(p, TurnStart)]
        assert starts and starts[0].index == 0, "the read goes on under a new turn-start"
        assert starts[0].turn.generation == session._hello.generation
        run = after[after.index(starts[-1]):]
        assert [p.step for p in run if p.type == "step-finish"] == list(range(STEPS)), "the whole turn again"
        assert "".join(p.text for p in run if p.type == "text-delta") == PROMPT * STEPS
        assert "another generation" in caplog.text
        moved = [p for p in glob.glob(store + ".damaged-*") if not p.endswith(("-wal", "-shm", "-served"))]
        assert len(moved) == 1, "the store is kept aside, with its -wal"
        assert os.path.exists(moved[0] + "-wal")
        with open(os.path.join(state_dir, identity.LOG_FILE), encoding="utf-8") as f:
            assert "is damaged or cut short" in f.read()
        again = list(session.turn("again "))
        assert again[-1].type == "turn-finish" and again[-1].finish_reason == "stop"


def test_b10_an_intact_wal_after_a_sigkill_keeps_the_generation(sandbox):
    """The detector's other side: a SIGKILL alone loses nothing, so the store and its
    generation stay (the cut step runs again in the same log, C13)."""
    opts = options("echo", agent_options=ECHO)
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if part.index == 45:
                break
        generation = turn.state.generation
        sigkill_bridge(sandbox, session.bridge_id)
        parts.extend(turn)
        assert session._hello.generation == generation
        assert turn.text() == PROMPT * STEPS
        store = os.path.join(identity.state_dir(sandbox.state_root, session.bridge_id), identity.STORE_FILE)
        assert glob.glob(store + ".damaged-*") == []
