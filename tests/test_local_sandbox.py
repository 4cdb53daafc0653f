"""LocalSandbox, the embedded default sandbox (a folder on this machine), and Templates, the
idempotent install steps run before a launch (C01, C04)."""
from __future__ import annotations

import os
import signal
import stat
import sys
import time
from typing import List

import pytest

from bridge_client import __version__
from bridge_client.errors import HarnessError, SandboxGone, TemplateError
from bridge_client.paths import HOME_ENV, SECRET_ENV
from bridge_client.sandbox import Endpoint, ExecResult, LocalSandbox, Sandbox, SpawnedProcess
from bridge_client.template import Template, TemplateStep, bridge_template

# ----------------------------------------------------------------------------- fixtures / helpers


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv(HOME_ENV, str(folder))
    return folder


@pytest.fixture
def ws(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.fixture
def sandbox(ws, home):
    return LocalSandbox(ws)


@pytest.fixture
def pids():
    """Pids this test started; every one still alive is killed (by pid) afterwards."""
    started: List[int] = []
    yield started
    for pid in started:
        _kill(pid)


@pytest.fixture
def spawned(pids):
    """Processes spawned by this test; killed and reaped afterwards."""
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            _kill(proc.pid)
        _wait_for(lambda: proc.poll() is not None)  # noqa: B023


def _finish(proc, timeout: float = 5.0) -> int:
    assert _wait_for(lambda: proc.poll() is not None, timeout), "spawned process did not finish"
    return proc.poll()


# ----------------------------------------------------------------------------- identity


def test_id_is_stable_for_the_same_folder(ws, home, tmp_path, monkeypatch):
    sb = LocalSandbox(ws)
    assert sb.id.startswith("local-") and len(sb.id) == len("local-") + 16
    assert LocalSandbox(str(ws)).id == sb.id
    assert LocalSandbox(str(ws) + "/").id == sb.id
    assert LocalSandbox(ws / "." / "").id == sb.id
    monkeypatch.chdir(tmp_path)
    assert LocalSandbox("workspace").id == sb.id


def test_id_is_the_same_through_a_symlink(ws, home, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(ws, target_is_directory=True)
    via_link = LocalSandbox(link)
    assert via_link.id == LocalSandbox(ws).id
    assert via_link.workdir == os.path.realpath(ws)


def test_id_differs_for_another_folder(ws, home, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    nested = ws / "sub"
    nested.mkdir()
    ids = {LocalSandbox(ws).id, LocalSandbox(other).id, LocalSandbox(nested).id}
    assert len(ids) == 3


def test_state_root_is_under_the_home_and_outside_the_workspace(sandbox, ws, home):
    root = sandbox.state_root
    assert root == os.path.join(str(home), "sandboxes", sandbox.id)
    assert os.path.commonpath([root, str(home)]) == str(home)
    real_ws = os.path.realpath(ws)
    assert os.path.commonpath([os.path.realpath(root), real_ws]) != real_ws


def test_state_root_follows_an_explicit_home(ws, home, tmp_path):
    other_home = tmp_path / "elsewhere"
    sb = LocalSandbox(ws, home=str(other_home))
    assert sb.state_root == os.path.join(str(other_home), "sandboxes", sb.id)
    assert sb.id == LocalSandbox(ws).id  # the home does not change the sandbox id


def test_constructing_does_not_create_files(ws, home):
    LocalSandbox(ws)
    assert os.listdir(ws) == [] and os.listdir(home) == []


def test_a_missing_folder_raises_file_not_found(tmp_path, home):
    with pytest.raises(FileNotFoundError):
        LocalSandbox(tmp_path / "missing")


def test_a_file_is_not_a_folder(tmp_path, home):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        LocalSandbox(tmp_path / "f")


def test_local_sandbox_is_a_sandbox(sandbox):
    assert isinstance(sandbox, Sandbox)
    assert "LocalSandbox" in repr(sandbox) and sandbox.id in repr(sandbox)


def test_expose_gives_a_loopback_websocket_url(sandbox):
    endpoint = sandbox.expose(45678)
    assert endpoint == Endpoint("ws://127.0.0.1:45678/")
    assert endpoint.headers == ()


# ----------------------------------------------------------------------------- exec


def test_exec_runs_in_the_workspace(sandbox, ws):
    result = sandbox.exec(["sh", "-c", "pwd -P"])
    assert result.stdout.decode().strip() == os.path.realpath(ws)
    assert sandbox.workdir == os.path.realpath(ws)


def test_exec_honours_cwd(sandbox, ws):
    sub = ws / "sub"
    sub.mkdir()
    assert sandbox.exec(["sh", "-c", "pwd -P"], cwd=str(sub)).stdout.decode().strip() == os.path.realpath(sub)


def test_exec_returns_exit_code_stdout_and_stderr(sandbox):
    result = sandbox.exec(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert result == ExecResult(3, b"out", b"err")
    assert not result.ok
    ok = sandbox.exec(["true"])
    assert ok.exit_code == 0 and ok.ok and ok.stdout == b"" and ok.stderr == b""


def test_exec_reports_a_signal_as_a_negative_exit_code(sandbox):
    assert sandbox.exec(["sh", "-c", "kill -9 $$"]).exit_code == -signal.SIGKILL


def test_exec_passes_extra_environment(sandbox):
    result = sandbox.exec(["sh", "-c", 'printf %s "$GREETING"'], env={"GREETING": "hello"})
    assert result.stdout == b"hello"


def test_exec_gives_the_command_no_stdin(sandbox):
    start = time.monotonic()
    assert sandbox.exec(["cat"], timeout=10).stdout == b""
    assert time.monotonic() - start < 5


def test_exec_timeout_raises_timeout_error(sandbox):
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        sandbox.exec(["sleep", "30"], timeout=0.3)
    assert time.monotonic() - start < 5
    assert "sleep" in str(info.value)


def test_exec_timeout_kills_what_the_command_started(sandbox, ws, pids):
    with pytest.raises(TimeoutError):
        sandbox.exec(["sh", "-c", "sleep 30 & echo $! > child.pid; wait"], timeout=0.5)
    child = int((ws / "child.pid").read_text())
    pids.append(child)
    assert _wait_for(lambda: not _alive(child), timeout=1)


def test_exec_of_a_missing_program_raises_file_not_found(sandbox):
    with pytest.raises(FileNotFoundError):
        sandbox.exec(["definitely-not-a-program-bridge-client"])


def test_exec_in_a_removed_folder_raises_sandbox_gone(sandbox, ws):
    os.rmdir(ws)
    with pytest.raises(SandboxGone) as info:
        sandbox.exec(["true"])
    assert isinstance(info.value, HarnessError)


def test_spawn_in_a_removed_folder_raises_sandbox_gone(sandbox, ws, spawned):
    os.rmdir(ws)
    with pytest.raises(SandboxGone):
        spawned.append(sandbox.spawn(["sleep", "30"]))


# ----------------------------------------------------------------------------- spawn


def test_spawn_detaches_into_a_new_session(sandbox, spawned):
    proc = sandbox.spawn(["sleep", "30"])
    spawned.append(proc)
    assert isinstance(proc, SpawnedProcess)
    assert isinstance(proc.pid, int) and proc.pid > 0
    assert proc.poll() is None
    assert os.getsid(proc.pid) != os.getsid(0)
    assert os.getsid(proc.pid) == proc.pid  # a session leader: no controlling terminal of ours
    assert os.getpgid(proc.pid) != os.getpgid(0)  # Ctrl-C to our group does not reach it
    assert str(proc.pid) in repr(proc)


def test_spawn_runs_in_the_workspace_and_reports_its_exit(sandbox, ws, spawned):
    proc = sandbox.spawn(["sh", "-c", "pwd -P > where; exit 7"])
    spawned.append(proc)
    assert _finish(proc) == 7
    assert (ws / "where").read_text().strip() == os.path.realpath(ws)


def test_spawn_appends_output_to_the_log(sandbox, home, spawned):
    log = home / "logs" / "nested" / "bridge.log"
    first = sandbox.spawn(["sh", "-c", "echo first-out; echo first-err >&2"], log_path=str(log))
    spawned.append(first)
    assert _finish(first) == 0
    second = sandbox.spawn(["sh", "-c", "echo second-out"], log_path=str(log))
    spawned.append(second)
    assert _finish(second) == 0
    text = log.read_text()
    assert "first-out" in text and "first-err" in text and "second-out" in text
    assert text.index("first-out") < text.index("second-out")


def test_spawn_of_a_missing_program_raises_file_not_found(sandbox, spawned):
    with pytest.raises(FileNotFoundError):
        spawned.append(sandbox.spawn(["definitely-not-a-program-bridge-client"]))


def test_spawned_children_do_not_see_the_host_secret(sandbox, ws, monkeypatch, spawned):
    monkeypatch.setenv(SECRET_ENV, "host-only-secret")
    monkeypatch.setenv("BRIDGE_CLIENT_OTHER", "also-host-only")
    env = {"BRIDGE_CLIENT_STATE_DIR": "/state", "EXTRA": "1"}
    proc = sandbox.spawn(["sh", "-c", "env > env.txt"], env=env)
    spawned.append(proc)
    assert _finish(proc) == 0
    env = (ws / "env.txt").read_text()
    assert "host-only-secret" not in env and SECRET_ENV not in env
    assert "also-host-only" not in env
    # What the caller passes explicitly does arrive.
    assert "BRIDGE_CLIENT_STATE_DIR=/state" in env.splitlines()
    assert "EXTRA=1" in env.splitlines()


def test_exec_children_do_not_see_the_host_secret(sandbox, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "host-only-secret")
    out = sandbox.exec(["env"]).stdout.decode()
    assert "host-only-secret" not in out and SECRET_ENV not in out
    assert "PATH=" in out  # the rest of the environment is kept


def test_spawned_process_outlives_its_handle(sandbox, spawned):
    proc = sandbox.spawn([sys.executable, "-c", "import time; time.sleep(30)"])
    spawned.append(proc)
    pid = proc.pid
    assert _alive(pid)
    os.kill(pid, signal.SIGTERM)
    assert _finish(proc) == -signal.SIGTERM


# ----------------------------------------------------------------------------- files


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_file_is_atomic_with_mode(sandbox, home):
    path = home / "state" / "bridges" / "x" / "token"
    sandbox.write_file(str(path), b"secret")
    assert path.read_bytes() == b"secret"
    assert _mode(path) == 0o600
    inode = os.stat(path).st_ino
    sandbox.write_file(str(path), b"launch", mode=0o640)
    assert path.read_bytes() == b"launch"
    assert _mode(path) == 0o640
    assert os.stat(path).st_ino != inode  # replaced by rename, never rewritten in place
    assert os.listdir(path.parent) == ["token"]


def test_read_file(sandbox, ws):
    (ws / "f").write_bytes(b"\x00\xffdata")
    assert sandbox.read_file(str(ws / "f")) == b"\x00\xffdata"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file(str(ws / "missing"))


# ----------------------------------------------------------------------------- Template


def _step(
    name="tool",
    check=("test", "-f", "marker"),
    install=("sh", "-c", "echo x >> installs; touch marker"),
    timeout=10.0,
):
    return TemplateStep(name=name, check=tuple(check), install=tuple(install), timeout=timeout)


def test_template_step_whose_check_passes_is_not_installed(sandbox, ws):
    (ws / "marker").write_text("")
    Template((_step(),)).run(sandbox)
    assert not (ws / "installs").exists()


def test_template_step_whose_check_fails_is_installed_then_checked(sandbox, ws):
    template = Template((_step(),))
    template.run(sandbox)
    assert (ws / "marker").exists()
    assert (ws / "installs").read_text() == "x\n"
    template.run(sandbox)  # idempotent: the second run installs nothing
    assert (ws / "installs").read_text() == "x\n"


def test_template_steps_run_in_order(sandbox, ws):
    first = _step("first", check=("test", "-f", "a"), install=("sh", "-c", "echo a >> order; touch a"))
    second = _step(
        "second", check=("test", "-f", "b"), install=("sh", "-c", "test -f a && echo b >> order && touch b")
    )
    Template((first, second)).run(sandbox)
    assert (ws / "order").read_text() == "a\nb\n"


def test_template_install_failure_raises_template_error_with_output(sandbox, ws):
    failing = _step("the tool", install=("sh", "-c", "echo boom-out; echo boom-err >&2; exit 4"))
    later = _step("later", check=("test", "-f", "later"), install=("touch", "later"))
    with pytest.raises(TemplateError) as info:
        Template((failing, later)).run(sandbox)
    exc = info.value
    assert isinstance(exc, HarnessError)
    assert exc.step == "the tool"
    assert "boom-out" in exc.output and "boom-err" in exc.output
    assert "exit 4" in str(exc) and "boom-out" in str(exc)
    assert not (ws / "later").exists()  # stops at the first failure


def test_template_still_missing_after_install_raises_template_error(sandbox, ws):
    step = _step(
        "phantom",
        check=("sh", "-c", "echo not-there >&2; exit 1"),
        install=("sh", "-c", "echo x >> installs"),
    )
    with pytest.raises(TemplateError) as info:
        Template((step,)).run(sandbox)
    assert info.value.step == "phantom"
    assert "still missing" in str(info.value)
    assert "not-there" in info.value.output
    assert (ws / "installs").read_text() == "x\n"  # it did try to install once


def test_template_install_timeout_raises_template_error(sandbox):
    step = _step("slow", install=("sleep", "30"), timeout=0.3)
    start = time.monotonic()
    with pytest.raises(TemplateError) as info:
        Template((step,)).run(sandbox)
    assert time.monotonic() - start < 5
    assert info.value.step == "slow" and "longer than" in str(info.value)


def test_template_missing_program_raises_template_error(sandbox):
    step = _step("ghost", install=("definitely-not-a-program-bridge-client",))
    with pytest.raises(TemplateError) as info:
        Template((step,)).run(sandbox)
    assert info.value.step == "ghost" and "cannot run" in str(info.value)


def test_template_in_a_gone_sandbox_raises_sandbox_gone(sandbox, ws):
    os.rmdir(ws)
    with pytest.raises(SandboxGone):
        Template((_step(),)).run(sandbox)


def test_empty_template_does_nothing(sandbox, ws):
    Template().run(sandbox)
    assert os.listdir(ws) == []


def test_bridge_template_checks_for_the_bridge_server_and_installs_this_version():
    (step,) = bridge_template().steps
    # The default installs from wheels built on the host and copied in (issue 8: no network
    # needed in the sandbox); its check imports the bridge server at this version.
    assert step.check[:2] == ("python3", "-c")
    assert "import sys, bridge_client, bridge_client.bridge.server" in step.check[2]
    assert repr(__version__) in step.check[2]
    assert step.install[0] == "python3" and "--no-index" in step.install
    assert step.install[-1] == f"bridge-client[bridge]=={__version__}"
    (custom,) = bridge_template(python="/opt/py/bin/python", requirement="bridge-client[bridge]>=0.1").steps
    assert custom.check[0] == custom.install[0] == "/opt/py/bin/python"
    assert custom.install[-1] == "bridge-client[bridge]>=0.1"


def test_a_folder_given_with_an_unexpanded_tilde_names_the_full_path(tmp_path, monkeypatch):
    # `bridge-client run ls --sandbox=~/repo`: the shell leaves that '~' alone.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "repo").mkdir()
    with pytest.raises(FileNotFoundError) as raised:
        LocalSandbox("~/repo")
    assert "'~' is not expanded" in str(raised.value) and str(tmp_path / "repo") in str(raised.value)
    with pytest.raises(FileNotFoundError) as raised:
        LocalSandbox("nosuch")
    assert "~" not in str(raised.value)
