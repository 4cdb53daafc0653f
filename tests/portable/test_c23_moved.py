"""C23, the session moves: a restore gives the session a new epoch, and a host still holding
the old state is told where it went (SessionMoved), never served by the old bridge again,
also after that bridge restarts (the move is in its store)."""
from __future__ import annotations

import os
import signal

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def test_c23_old_bridge_answers_session_moved_with_where_it_went(sandbox, other_sandbox, tmp_path):
    out = str(tmp_path / "chat.export")
    old = bc.create_session(options("echo"), session_options(sandbox))
    list(old.turn("one", turn_id="t-1"))
    held = old.state  # what a host keeps to resume the session
    old.export(out)
    pid = old._hello.pid
    with bc.restore_session(out, session_options(other_sandbox), options("echo"), previous=old) as new:
        assert old.released
        # A host still holding the old state, in the old sandbox: told where the session went.
        stale = bc.create_session(options("echo"), session_options(sandbox, resume=held))
        with pytest.raises(bc.SessionMoved) as info:
            stale.turn("two")
        assert info.value.fields["epoch"] == 1
        assert info.value.fields["to"] == {"sandbox": other_sandbox.id, "bridgeId": new.bridge_id}
        stale.release()
        # The old bridge, killed and launched again, still says so (the move is stored).
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}/cmdline") or _zombie(pid), 10.0)
        again = bc.create_session(options("echo"), session_options(sandbox, resume=held))
        with pytest.raises(bc.SessionMoved):
            again.turn("two")
        again.release()
        # The new place serves it, at the epoch after the export's.
        parts = list(new.turn("two", turn_id="t-2"))
        assert parts[-1].type == "turn-finish"
        new.export(out)
    from bridge_client.wire import portable

    body = portable.decode_export(open(out, "rb").read())
    assert body["epoch"] == 1 and [t["turnId"] for t in body["turns"]] == ["t-1", "t-2"]


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True
