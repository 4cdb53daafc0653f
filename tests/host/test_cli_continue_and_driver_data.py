"""The command line's continue and driver data: a continue command that names its sandbox and
refuses to re-run a turn in another one, driver data shown, OSErrors that name the state
directory, MODULE:CALLABLE agents loaded in the sandbox folder, every error on one
``bridge-client: error:`` line, SIGTERM suspends, ``stop`` of a stopped bridge is not bad
input, ``stop --all``, ``python -m bridge_client``. Real processes, real bridges, real files."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from host_support import kill_all_under, wait_until

pytestmark = pytest.mark.timeout(120)


def cli(*args, cwd=None, env=None, timeout=60, module="bridge_client.cli"):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
    )


def started(*args, cwd=None, env=None):
    """A ``bridge-client`` process whose output the test reads line by line."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=full_env,
    )


def interrupted(proc, signum=signal.SIGINT, first="["):
    """Wait for the first line of output, send ``signum``; return (status, stdout, stderr)."""
    try:
        line = proc.stdout.readline()
        assert line.startswith(first), line
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, line + out, err


def one_error_line(done, status):
    assert done.returncode == status, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error: "), done.stderr
    return lines[0]


@pytest.fixture
def elsewhere(tmp_path, home):
    """Another folder; every process still working in it (a bridge there) is killed afterwards."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


# ----------------------------------------------------------------------------- 1: continue


def test_continue_command_names_the_sandbox_and_another_sandbox_is_refused(workspace, elsewhere):
    status, out, err = interrupted(
        started("run", "sleep 2", "touch made-here", cwd=workspace), first="[shell] sleep 2"
    )
    assert status == 130, err
    words = shlex.split(err.strip().splitlines()[-1])
    assert words[:2] == ["bridge-client", "continue"]
    assert words[words.index("--sandbox") + 1] == os.path.realpath(workspace)
    state_file = words[2]
    with open(state_file) as f:
        assert json.load(f)["sandbox"] == os.path.realpath(workspace)

    # The printed command, pasted in another folder: the turn goes on in its own sandbox.
    done = cli(*words[1:], cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert os.path.exists(os.path.join(workspace, "made-here"))
    assert not os.path.exists(os.path.join(elsewhere, "made-here"))

    # Without --sandbox: the saved file says where the turn runs.
    done = cli("continue", state_file, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(os.path.join(elsewhere, "made-here"))

    # Another sandbox, where the turn's bridge is not: refused, nothing runs there.
    line = one_error_line(cli("continue", state_file, "--sandbox", elsewhere), 2)
    assert "--rerun-here" in line and os.path.realpath(workspace) in line
    assert not os.path.exists(os.path.join(elsewhere, "made-here"))

    # Asked for explicitly: the turn runs again from its prompt there (C14).
    done = cli("continue", state_file, "--sandbox", elsewhere, "--rerun-here")
    assert done.returncode == 0, done.stderr
    assert "runs again from its prompt" in done.stderr
    assert os.path.exists(os.path.join(elsewhere, "made-here"))


def test_continue_of_a_state_without_its_sandbox_is_refused_where_the_bridge_is_not(
    workspace, elsewhere, home
):
    status, _, err = interrupted(
        started("run", "a b", "--agent", "echo", "--option", "steps=4", "--option", "delay=0.05",
                "--sandbox", workspace)
    )
    assert status == 130, err
    state_file = shlex.split(err.strip().splitlines()[-1])[2]
    with open(state_file) as f:
        record = json.load(f)
    del record["sandbox"]  # as TurnState.to_json() writes it
    plain = os.path.join(home, "plain.json")
    with open(plain, "w") as f:
        json.dump(record, f)
    line = one_error_line(cli("continue", plain, cwd=elsewhere), 2)
    assert "does not say where it ran" in line
    done = cli("continue", plain, "--sandbox", workspace, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == "[finished] stop"


# ----------------------------------------------------------------------------- 2, 5, 15: drivers

_SHOWING_AGENT = '''
from bridge_client.bridge.driver import options_object


class Showing:
    agent_id = "showing"

    def run_turn(self, ctx):
        ctx.start_step()
        ctx.reasoning("let me think")
        ctx.text("the answer")
        ctx.data("showing-error", "Reconnecting... 2/5")
        ctx.data("plan", {"steps": 2})
        ctx.finish_step()
        return "stop"


def make_driver(options):
    options_object(options, "showing", ())
    return Showing()
'''


@pytest.fixture
def showing_agent(workspace):
    with open(os.path.join(workspace, "showing_agent.py"), "w") as f:
        f.write(_SHOWING_AGENT)
    return "showing_agent:make_driver"


def test_module_agent_loads_in_the_sandbox_folder_and_data_and_reasoning_show(
    workspace, elsewhere, showing_agent
):
    # The module is in the sandbox folder only: not importable by the command itself.
    done = cli("run", "hi", "--agent", showing_agent, "--sandbox", workspace, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "[thinking] let me think" in lines
    assert "the answer" in lines
    assert "[showing-error] Reconnecting... 2/5" in lines
    assert '[plan] {"steps": 2}' in lines


def test_module_agent_bad_options_and_missing_module_are_bad_input(workspace, home, showing_agent):
    line = one_error_line(
        cli("run", "hi", "--agent", showing_agent, "--option", "x=1", "--sandbox", workspace), 2
    )
    assert f"agent '{showing_agent}'" in line and "unknown showing option" in line
    line = one_error_line(cli("run", "hi", "--agent", "nope_mod:make", "--sandbox", workspace), 2)
    assert "cannot load agent" in line and "nope_mod" in line
    assert not os.path.exists(os.path.join(home, "sandboxes")), "no bridge state was created"


def test_a_killed_command_says_which_signal(workspace):
    done = cli("run", "kill -TERM $$", "--sandbox", workspace)
    assert done.returncode == 1
    assert "[shell error] killed by signal 15 (SIGTERM)" in done.stdout


def test_verbose_connection_closed_line_is_not_doubled(workspace):
    done = cli("-v", "run", "hi", "--agent", "echo", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert re.search(r"connection \S+ closed", done.stderr), done.stderr
    assert not re.search(r"connection (\S+) closed: connection \1 closed", done.stderr), done.stderr


# ----------------------------------------------------------------------------- 3, 12, 13: errors


def test_an_unusable_state_directory_is_named(workspace):
    done = cli(
        "run", "echo hi", "--sandbox", workspace,
        env={"BRIDGE_CLIENT_HOME": "/proc/nope", "BRIDGE_CLIENT_SECRET": ""},
    )
    line = one_error_line(done, 1)
    assert "state directory /proc/nope" in line
    assert "cannot write the output" not in line


def test_library_errors_have_the_same_prefix(workspace, home):
    secret = os.path.join(home, "secret")
    with open(secret, "w") as f:
        f.write("ab" * 32)
    os.chmod(secret, 0o644)
    line = one_error_line(cli("run", "hi", "--sandbox", workspace, env={"BRIDGE_CLIENT_SECRET": ""}), 1)
    assert "readable by others" in line or "0600" in line
    assert "HarnessError" not in line


def test_a_failed_turn_prints_its_error_once(workspace):
    done = cli("run", "exit 4", "--sandbox", workspace)
    assert done.returncode == 1
    assert (done.stdout + done.stderr).count("command exited with status 4") == 1


# ----------------------------------------------------------------------------- 10, 11: slow agents


def test_help_lists_every_agent_option():
    done = cli("run", "--help")
    assert done.returncode == 0
    for key in (
        "timeout=", "keep_going=", "shell=",
        "steps=", "chunks=", "delay=", "fail_at=",
        "model=", "base_url=", "api_key_env=", "max_steps=", "temperature=", "system=",
        "max_retries=", "backoff_initial=", "backoff_max=", "request_timeout=", "command_timeout=",
        "max_output=", "include_usage=",
        "executable=", "permission_mode=", "max_turns=", "append_system_prompt=", "allowed_tools=",
        "extra_args=", "continue_prompt=", "interrupt_grace=", "sandbox=", "skip_git_repo_check=",
    ):
        assert key in done.stdout, key
    assert "npm install -g" in done.stdout


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_model_server_names_the_system_error(workspace):
    done = cli(
        "run", "hi", "--agent", "openai", "--option", "model=m",
        "--option", f"base_url=http://127.0.0.1:{_free_port()}/v1", "--option", "max_retries=0",
        "--sandbox", workspace,
    )
    assert done.returncode == 1
    assert "Connection refused" in done.stdout and "Errno" in done.stdout, done.stdout


def test_a_retried_model_request_is_shown(workspace):
    done = cli(
        "run", "hi", "--agent", "openai", "--option", "model=m",
        "--option", f"base_url=http://127.0.0.1:{_free_port()}/v1", "--option", "max_retries=1",
        "--option", "backoff_initial=0.01", "--sandbox", workspace,
    )
    assert done.returncode == 1
    retries = [line for line in done.stdout.splitlines() if line.startswith("[openai-retry] ")]
    assert len(retries) == 1, done.stdout
    assert "Connection refused" in retries[0] and "try 2 of 2" in retries[0], retries


def test_claude_refusing_root_gets_the_is_sandbox_hint(workspace, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(
        "#!/bin/sh\necho '--dangerously-skip-permissions cannot be used with root/sudo privileges "
        "for security reasons' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    done = cli(
        "run", "hi", "--agent", "claude-code", "--sandbox", workspace,
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert done.returncode == 1
    assert "IS_SANDBOX=1" in done.stdout, done.stdout


def test_an_npm_install_is_announced_and_a_missing_installer_says_what_to_do(workspace, capsys):
    import bridge_client as bc
    from bridge_client.cli.agents import AnnouncedStep, announced
    from bridge_client.errors import TemplateError

    from bridge_client.sandbox.npm import NpmCliStep

    for agent in ("codex", "claude-code"):  # the npm step announces itself (in the library, once)
        steps = announced(bc.bridge_options(agent).template).steps
        assert [type(s) for s in steps if s.install[:1] == ("npm",)] == [NpmCliStep], agent

    sandbox = bc.LocalSandbox(workspace)
    step = AnnouncedStep(
        "the Fake CLI (fake)", ("/bin/sh", "-c", "test -f fake"), ("/bin/sh", "-c", "touch fake"), 30.0
    )
    step.run(sandbox)
    assert "the Fake CLI (fake) is missing; installing it" in capsys.readouterr().err
    step.run(sandbox)  # present now: nothing said
    assert capsys.readouterr().err == ""
    missing = AnnouncedStep(
        "the Fake CLI (fake2)", ("/bin/sh", "-c", "test -f fake2"), ("no-such-npm-here", "install"), 30.0
    )
    with pytest.raises(TemplateError, match="install Node.js and npm there"):
        missing.run(sandbox)


# ----------------------------------------------------------------------------- 14: exit codes


def test_sigterm_suspends_like_ctrl_c(workspace):
    status, _, err = interrupted(
        started("run", "a b", "--agent", "echo", "--option", "steps=20", "--option", "delay=0.05",
                "--sandbox", workspace),
        signum=signal.SIGTERM,
    )
    assert status == 143, err
    assert "Traceback" not in err
    words = shlex.split(err.strip().splitlines()[-1])
    assert words[:2] == ["bridge-client", "continue"] and os.path.exists(words[2])
    done = cli(*words[1:])
    assert done.returncode == 0, done.stderr


def test_ctrl_c_while_the_command_loads_is_not_a_traceback(tmp_path):
    # A finder that sends SIGINT to this process at the first module the command imports.
    script = textwrap.dedent(
        """
        import os, signal, sys

        # As on a terminal: a runner started in the background (bash `&`) passes SIGINT on
        # ignored, and Python then keeps it ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        class Finder:
            def find_spec(self, name, path=None, target=None):
                if "bridge_client.cli" in sys.modules and name.startswith("bridge_client."):
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.SIGINT)
                return None

        sys.meta_path.insert(0, Finder())
        import bridge_client  # the package face first, as the console script does
        from bridge_client.cli import main
        sys.exit(main(["--version"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- 15: small things


def test_python_m_bridge_client_is_the_command():
    done = cli("--version", module="bridge_client")
    assert done.returncode == 0 and done.stdout.startswith("bridge-client "), done


def test_stop_help_shows_its_default():
    done = cli("stop", "--help")
    assert done.returncode == 0 and "default: 10" in done.stdout


# ----------------------------------------------------------------------------- 17: bridges, stop


def test_bridges_shows_running_turns_and_stop_all_stops_them(workspace):
    status, _, err = interrupted(
        started("run", "a b", "--agent", "echo", "--option", "steps=100", "--option", "delay=0.1",
                "--sandbox", workspace)
    )
    assert status == 130, err
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    rows = [json.loads(line) for line in cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()]
    assert sorted(r["running"] for r in rows) == [0, 1], rows
    table = cli("bridges", "--sandbox", workspace).stdout
    assert "RUNNING" in table.splitlines()[0]

    other = cli("stop", rows[0]["id"], "--sandbox", workspace, env={"BRIDGE_CLIENT_SECRET": "another"})
    assert "BRIDGE_CLIENT_SECRET" in one_error_line(other, 1)

    assert "give one BRIDGE_ID or --all" in one_error_line(cli("stop", "--sandbox", workspace), 2)
    done = cli("stop", "--all", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("stopped bridge") == 2
    pids = [r["pid"] for r in rows]
    assert wait_until(
        lambda: all(
            not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
            for pid in pids
        )
    )
    again = cli("stop", "--all", "--sandbox", workspace)
    assert again.returncode == 0 and "no running bridges" in again.stdout


def test_stop_of_an_unknown_bridge_is_a_failure_not_bad_input(workspace):
    line = one_error_line(cli("stop", "0" * 32, "--sandbox", workspace), 1)
    assert "no bridge" in line
