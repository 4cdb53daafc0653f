"""Store generations (B10) and damaged stores (C07): a store file that cannot be trusted is
moved aside and a fresh one started, and a host never splices the logs of two generations."""
from __future__ import annotations

import glob
import logging
import os
import signal

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.wire.parts import HelloResult, TurnStart, TurnState
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _store(bridge) -> str:
    return os.path.join(bridge.state, identity.STORE_FILE)


def _moved(state: str):
    found = glob.glob(os.path.join(state, identity.STORE_FILE + ".damaged-*"))
    return sorted(p for p in found if not p.endswith(("-wal", "-shm", "-served")))


def test_b10_hello_and_turn_start_carry_the_store_generation(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 1})
    with bridge.connect() as c:
        generation = c.value("Hello")["generation"]
        c.open(sid)
        c.start(sid, tid, "a")
        parts, _, _ = c.read(sid, tid)
    assert parts[0]["turn"]["generation"] == generation
    bridge.stop()
    bridge.start()  # the same file: the same generation
    with bridge.connect() as c:
        assert c.value("Hello")["generation"] == generation
    # Turn states and Hello answers of bridges from before generations still decode.
    old = dict(parts[0]["turn"])
    del old["generation"]
    assert TurnState.from_dict(old).generation is None
    assert TurnState.from_dict(old).to_dict() == {**old, "generation": None}
    hello = {"agentId": "echo", "bridgeId": "b", "instance": "i", "protocol": 1, "pid": 1, "startedAt": "x"}
    assert HelloResult.from_dict(hello).generation is None


def _malformed(path: str) -> None:
    """Keep SQLite's header, overwrite the rest of page 1 (the schema's b-tree)."""
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xa5" * 3996)


def _not_sqlite(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"this is not a database, just text somebody wrote here\n" * 100)


@pytest.mark.parametrize("damage", [_malformed, _not_sqlite], ids=["malformed", "not-sqlite"])
def test_b10_a_damaged_store_is_moved_aside_and_the_bridge_starts_fresh(make_bridge, sid, tid, damage):
    bridge = make_bridge(options={"steps": 1})
    with bridge.connect() as c:
        old_generation = c.value("Hello")["generation"]
        c.open(sid)
        c.start(sid, tid, "a")
        c.read(sid, tid)
    bridge.stop()
    damage(_store(bridge))
    with open(_store(bridge), "rb") as f:
        damaged = f.read()
    bridge.start()  # used to exit 2 at every launch
    with bridge.connect() as c:
        assert c.value("Hello")["generation"] != old_generation
        # The session comes back from the state the host holds (C07).
        state = {"sessionId": sid, "revision": 1, "data": {"turns": 1}}
        assert c.open(sid, state) == state
        c.start(sid, tid + "-2", "b")
        parts, _, _ = c.read(sid, tid + "-2")
        assert parts[-1]["finishReason"] == "stop"
    moved = _moved(bridge.state)
    assert len(moved) == 1
    with open(moved[0], "rb") as f:
        assert f.read() == damaged, "the damaged file is kept as it was"
    log = bridge.log()
    assert "is damaged" in log and os.path.basename(moved[0]) in log


def test_b10_a_wal_lost_after_a_sigkill_starts_a_new_generation(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2})
    with bridge.connect() as c:
        old_generation = c.value("Hello")["generation"]
        c.open(sid)
        c.start(sid, tid, "a b")
        c.read(sid, tid)
    bridge.kill()
    wal = _store(bridge) + "-wal"
    assert os.path.exists(wal)
    os.unlink(wal)
    bridge.start()
    with bridge.connect() as c:
        assert c.value("Hello")["generation"] != old_generation
        # The turn of the old store is not continued from a log with holes: it is unknown here.
        assert c.causes("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0})
    assert len(_moved(bridge.state)) == 1
    assert "write-ahead log" in bridge.log()


# ---------------------------------------------------------------------------- the host side


def _state_dir(sandbox, session) -> str:
    return identity.state_dir(sandbox.state_root, session.bridge_id)


def _kill_bridge(session, sig=signal.SIGKILL) -> None:
    pid = session._hello.pid
    os.kill(pid, sig)

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    assert wait_until(gone, 10)


def test_b10_a_turn_of_another_generation_runs_again_from_its_prompt(sandbox, caplog):
    opts = options("echo", agent_options={"steps": 2})
    prompt = "one two "
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(prompt)
        assert [p.type for p in turn][-1] == "turn-finish"
        state = turn.state
        assert state.generation is not None
        _kill_bridge(session)
        store = os.path.join(_state_dir(sandbox, session), identity.STORE_FILE)
        for suffix in ("", "-wal", "-shm"):  # the store is emptied
            if os.path.exists(store + suffix):
                os.unlink(store + suffix)
        with caplog.at_level(logging.WARNING, logger="bridge_client"):
            again = session.continue_turn(state, steps=1)
            parts = list(again)
        starts = [p for p in parts if isinstance(p, TurnStart)]
        assert starts and starts[0].index == 0
        assert starts[-1].turn.generation not in (None, state.generation)
        assert again.text() == prompt * 2, "the turn ran again from its prompt, both steps, not spliced"
        assert [p.step for p in parts if p.type == "step-finish"] == [0, 1]
        assert "another generation" in caplog.text


def test_c07_a_session_goes_on_from_the_host_state_after_its_store_was_damaged(sandbox, caplog):
    opts = options("echo", agent_options={"steps": 1})
    with bc.create_session(opts, session_options(sandbox)) as session:
        list(session.turn("a"))
        list(session.turn("b"))
        assert session.state.data == {"turns": 2}
        _kill_bridge(session, signal.SIGTERM)
        state_dir = _state_dir(sandbox, session)
        _not_sqlite(os.path.join(state_dir, identity.STORE_FILE))
        with caplog.at_level(logging.WARNING, logger="bridge_client"):
            turn = session.turn("c")
            assert [p.type for p in turn][-1] == "turn-finish"
        assert session.state.data == {"turns": 3}, "the host's state came back, then grew"
        assert "has a new store" in caplog.text
        with open(os.path.join(state_dir, identity.LOG_FILE), encoding="utf-8") as f:
            assert "is damaged" in f.read()
