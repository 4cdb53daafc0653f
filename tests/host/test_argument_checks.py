"""Bad arguments are refused where they are given, with a TypeError or ValueError that says
what is expected, and not later as a traceback from deep inside a turn or as a bridge that
exits at launch (newcomer findings 6 and 8)."""
from __future__ import annotations

import subprocess
import sys

import pytest

import bridge_client as bc
from bridge_client.driver_options import BUILTIN_DRIVER_NAMES, check_agent_options
from host_support import session_options

# ----------------------------------------------------------------------------- finding 6


def test_workspace_refuses_a_folder_name_and_says_which_sandbox_to_use():
    with pytest.raises(TypeError, match=r"Workspace needs a Sandbox such as LocalSandbox\('\.'\).*got str"):
        bc.Workspace(".")  # type: ignore[arg-type]


def test_workspace_takes_a_sandbox_or_nothing(tmp_path):
    sandbox = bc.LocalSandbox(str(tmp_path))
    assert bc.Workspace(sandbox).sandbox is sandbox
    assert bc.Workspace().sandbox is None


def test_create_session_options_refuses_a_sandbox_where_a_workspace_goes(tmp_path):
    sandbox = bc.LocalSandbox(str(tmp_path))
    with pytest.raises(TypeError, match=r"workspace needs a Workspace .*got LocalSandbox"):
        bc.CreateSessionOptions(workspace=sandbox)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"session_id must be a str or None, got int"):
        bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), session_id=7)  # type: ignore[arg-type]


def test_create_session_names_both_arguments_it_needs(tmp_path):
    so = session_options(bc.LocalSandbox(str(tmp_path)))
    # A driver name is a valid first argument (the short form); anything else is named.
    with pytest.raises(TypeError, match=r"or a BridgeOptions .* first argument, got int"):
        bc.create_session(42, so)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a CreateSessionOptions .* second argument, got Workspace"):
        bc.create_session(bc.bridge_options("shell"), so.workspace)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- finding 8


def test_bridge_options_refuses_an_unknown_driver_name_at_once():
    with pytest.raises(ValueError, match=r"unknown driver 'nosuch': use one of echo, shell, openai"):
        bc.bridge_options("nosuch")
    with pytest.raises(TypeError, match="driver must be a str"):
        bc.bridge_options(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "driver, agent_options, message",
    [
        ("echo", {"stepz": 2}, r"unknown echo option\(s\): stepz"),
        ("echo", {"steps": 0}, r"echo option 'steps' must be an integer >= 1, got 0"),
        ("echo", {"steps": None}, r"echo option 'steps' must be an integer >= 1, got None"),
        ("echo", [1], r"echo options must be a JSON object, got list"),
        ("shell", {"timeout": -1}, r"shell option 'timeout' must be a number of seconds > 0"),
        ("shell", {"keep_going": "yes"}, r"shell option 'keep_going' must be true or false"),
        ("openai", None, r"openai option 'model' is required"),
        ("openai", {"model": "m", "api_key": "sk-x"}, r"never put the API key in agent_options"),
        ("openai", {"model": "m", "base_url": "ftp://x"}, r"must be an http:// or https:// URL"),
        ("claude-code", {"max_turns": 0}, r"claude-code option 'max_turns' must be an integer >= 1"),
        ("codex", {"skip_git_repo_check": 1}, r"codex option 'skip_git_repo_check' must be true or false"),
    ],
)
def test_bridge_options_checks_a_built_in_drivers_options_at_once(driver, agent_options, message):
    with pytest.raises(ValueError, match=message):
        bc.bridge_options(driver, agent_options=agent_options)


def test_bridge_options_accepts_good_options_and_leaves_them_as_given():
    given = {"steps": 2, "delay": 0.5, "chunks": None}
    options = bc.bridge_options("echo", agent_options=given)
    assert options.agent_options == {"steps": 2, "delay": 0.5, "chunks": None}
    assert bc.bridge_options("openai", agent_options={"model": "m"}).id == "openai"


def test_a_module_callable_driver_is_not_checked_on_the_host():
    # It runs in the sandbox: the host may not be able to import it, and its options are its own.
    options = bc.bridge_options("only_in_the_sandbox:make", agent_options={"anything": 1}, agent_id="mine")
    assert options.args[-1] == "only_in_the_sandbox:make"
    with pytest.raises(ValueError, match="unknown driver ':make'"):
        bc.bridge_options(":make")


def test_the_host_check_and_the_bridge_check_are_the_same_one():
    # The bridge loads drivers by BUILTIN_DRIVERS; the host knows the same names, and each
    # driver's make_driver refuses what bridge_options refuses, with the same message.
    from bridge_client.drivers import BUILTIN_DRIVERS
    from bridge_client.drivers.echo import make_driver as make_echo
    from bridge_client.drivers.shell import make_driver as make_shell

    assert tuple(BUILTIN_DRIVERS) == BUILTIN_DRIVER_NAMES
    for make, name, bad in ((make_echo, "echo", {"delay": -1}), (make_shell, "shell", {"shell": ""})):
        with pytest.raises(ValueError) as on_host:
            check_agent_options(name, bad)
        with pytest.raises(ValueError) as in_bridge:
            make(bad)
        assert str(on_host.value) == str(in_bridge.value)


def test_checking_options_on_the_host_imports_no_driver_and_no_server():
    code = (
        "import sys, bridge_client as bc\n"
        "try:\n"
        "    bc.bridge_options('echo', agent_options={'steps': 0})\n"
        "except ValueError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('not refused')\n"
        "bad = [m for m in sys.modules if m.startswith('bridge_client.drivers')\n"
        "       or m in ('bridge_client.bridge.server', 'bridge_client.bridge.turns', 'websockets')]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# ----------------------------------------------------------------------------- finding 7


def test_c11_in_one_thread_a_new_turn_suspends_the_unfinished_one_and_reading_it_again_resumes_it(sandbox):
    from host_support import options

    with bc.create_session(
        options("echo", agent_options={"steps": 3, "delay": 0.01}), session_options(sandbox)
    ) as session:
        first = session.turn("a b c")
        for part in first:
            if isinstance(part, bc.StepFinish):
                break  # a break cannot run code: the turn stays the session's current one
        second = session.turn("x y")  # no TurnInProgress in the same thread: `first` is suspended
        assert next(second).type == "turn-start"
        rest = list(first)  # reading the suspended turn again resumes it (and suspends `second`)
        assert {p.step for p in rest if p.step is not None} == {1, 2}
        assert rest[-1].type == "turn-finish" and first.done and first.steps == 3
        after = list(second)
        assert after[0].type == "step-start" and after[-1].type == "turn-finish"
        assert second.text() == "x y" * 3  # each of its 3 steps echoes the prompt once: none lost, none twice


def test_bridge_agent_names_the_options_it_needs():
    with pytest.raises(TypeError, match=r"bridge_agent needs a BridgeOptions .*got str"):
        bc.bridge_agent("shell")  # type: ignore[arg-type]
    assert bc.bridge_agent(bc.bridge_options("echo")).id == "echo"


def test_workspace_takes_any_object_with_the_sandbox_members_without_running_its_properties(tmp_path):
    inner = bc.LocalSandbox(str(tmp_path))

    class LazySandbox:
        """An adapter whose id is only known once it is connected (its property raises before)."""

        @property
        def id(self) -> str:
            raise RuntimeError("not connected yet")

        state_root = inner.state_root
        workdir = inner.workdir
        exec = inner.exec
        spawn = inner.spawn
        read_file = inner.read_file
        write_file = inner.write_file
        expose = inner.expose

    lazy = LazySandbox()
    assert bc.Workspace(lazy).sandbox is lazy  # type: ignore[arg-type]

    class NoExpose:
        id = "x"
        state_root = workdir = "/tmp"

    with pytest.raises(TypeError, match="got NoExpose"):
        bc.Workspace(NoExpose())  # type: ignore[arg-type]
