"""What a new user meets first: ``dir(bridge_client)`` and tab completion show the public
names (the lazy ones too) and not the package's own helpers; ``create_session("shell",
"./repo")`` starts in one call, beside the full form."""
from __future__ import annotations

import subprocess
import sys

import pytest

import bridge_client as bc


def test_dir_shows_the_lazy_public_names_and_hides_the_helpers():
    # In a fresh interpreter: nothing has loaded the lazy names yet.
    code = (
        "import bridge_client as bc, sys; print(' '.join(dir(bc))); "
        "print('bridge_client.client.session' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    names, loaded = done.stdout.splitlines()
    names = names.split()
    for public in ("create_session", "Session", "Turn", "bridge_options", "Agent", "LocalSandbox"):
        assert public in names
    for helper in ("TYPE_CHECKING", "importlib", "logging", "Any", "List"):
        assert helper not in names
    assert set(bc.__all__) <= set(names)
    assert names == sorted(names)
    assert loaded == "False"  # dir() loads nothing


def test_create_session_short_form_runs_a_turn_in_a_folder(workspace):
    with bc.create_session("shell", workspace) as session:
        turn = session.turn("echo short > s.txt\ncat s.txt")
        assert [p.type for p in turn][-1] == "turn-finish"
        assert turn.finish.finish_reason == "stop"
    with open(f"{workspace}/s.txt") as f:
        assert f.read() == "short\n"


def test_create_session_short_form_takes_a_sandbox_and_agent_options(sandbox):
    with bc.create_session("echo", sandbox, agent_options={"steps": 2}) as session:
        turn = session.turn("ab")
        list(turn)
        assert turn.text() == "abab"


def test_create_session_short_form_is_the_same_bridge_as_the_full_form(sandbox):
    session_options = bc.CreateSessionOptions(workspace=bc.Workspace(sandbox))
    full = bc.create_session(bc.bridge_options("echo"), session_options)
    short = bc.create_session("echo", sandbox.workdir)
    try:
        assert full.bridge_id == short.bridge_id
    finally:
        full.release()
        short.release()


def test_create_session_takes_the_session_options_as_keywords(workspace):
    session = bc.create_session("shell", workspace, idle_timeout=60, env={"HOUSE": "order"})
    try:
        assert session._opts.idle_timeout == 60
        turn = session.turn('echo "$HOUSE"')
        list(turn)
        assert "order" in turn.text(), turn.text()
    finally:
        session.close()
    assert session.released, "close() releases the session"
    session.close()  # idempotent, as release() is
    with pytest.raises(TypeError, match="unexpected keyword 'idle_timout': use one of .*idle_timeout"):
        bc.create_session("shell", workspace, idle_timout=60)
    with pytest.raises(TypeError, match="the second argument gives the workspace"):
        bc.create_session("shell", workspace, workspace=None)
    with pytest.raises(ValueError):
        bc.create_session("shell", workspace, idle_timeout=-1)


def test_create_session_says_what_it_takes(workspace, tmp_path):
    with pytest.raises(TypeError, match="driver name such as 'shell', or a BridgeOptions"):
        bc.create_session(42, workspace)
    with pytest.raises(TypeError, match="a folder, a Sandbox, or a CreateSessionOptions"):
        bc.create_session("shell", 42)
    with pytest.raises(TypeError, match="agent_options goes with a driver name"):
        bc.create_session(bc.bridge_options("echo"), workspace, agent_options={"steps": 1})
    with pytest.raises(ValueError, match="unknown driver"):
        bc.create_session("no-such-driver", workspace)
    with pytest.raises(FileNotFoundError):
        bc.create_session("shell", str(tmp_path / "missing"))
