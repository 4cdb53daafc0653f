"""C23, the journal: a session with ``journal=`` keeps an export of itself on the host, written
at each turn's end; when its sandbox is gone, the error names the journal and the command that
restores it, and the journal restores the session elsewhere (no export made by hand)."""
from __future__ import annotations

import os
import shutil

import pytest

import bridge_client as bc
from bridge_client.wire import portable
from host_support import kill_all_under, options, session_options

pytestmark = pytest.mark.timeout(60)


def test_c23_journal_kept_at_each_turn_end_restores_after_the_sandbox_is_gone(
    sandbox, workspace, other_sandbox, tmp_path
):
    journal = str(tmp_path / "journal" / "chat.export")
    session = bc.create_session(options("echo"), session_options(sandbox, journal=journal))
    assert session.journal == journal
    list(session.turn("one", turn_id="t-1"))
    assert [t["turnId"] for t in portable.decode_export(open(journal, "rb").read())["turns"]] == ["t-1"]
    list(session.turn("two", turn_id="t-2"))
    assert [t["turnId"] for t in portable.decode_export(open(journal, "rb").read())["turns"]] == [
        "t-1", "t-2",
    ]
    # The sandbox goes: its bridge (SIGKILL by pid), its folder, its state.
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(sandbox._state_root)
    shutil.rmtree(workspace)
    with pytest.raises(bc.BridgeUnavailable) as info:
        list(session.turn("three"))
    assert info.value.journal == journal
    assert f"bridge-client restore {journal} --sandbox NEW" in str(info.value).splitlines()[0]
    with bc.restore_session(journal, session_options(other_sandbox), options("echo")) as restored:
        assert restored.id == session.id
        parts = list(restored.turn("three", turn_id="t-3"))
        assert parts[-1].type == "turn-finish"
    assert not [n for n in os.listdir(os.path.dirname(journal)) if n.endswith(".tmp")]


def test_c23_no_journal_by_default_and_true_keeps_it_in_the_state_dir(sandbox, home):
    with bc.create_session(options("echo"), session_options(sandbox)) as plain:
        list(plain.turn("x"))
        assert plain.journal is None
    with bc.create_session(options("echo"), session_options(sandbox, journal=True)) as kept:
        list(kept.turn("x"))
        assert kept.journal == os.path.join(home, "journals", f"{kept.id}.export")
        assert os.path.exists(kept.journal)
    assert not os.path.exists(os.path.join(home, "journals", f"{plain.id}.export"))
    with pytest.raises(TypeError):
        bc.CreateSessionOptions(journal=3)
