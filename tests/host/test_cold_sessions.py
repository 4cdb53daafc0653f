"""Many sessions finding no bridge at once: one launch per bridge in a host process, one
template check, and losers of the lock race across processes that wait for the winner
(C04, C05). Counts come from the sandbox's own records (spawns, commands run) and the
bridge's log, never from timings."""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable, List, Optional, Tuple

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client import launcher
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(180)


class CountingSandbox(bc.LocalSandbox):
    """A LocalSandbox that records its spawns and commands; ``gate`` runs before a spawn."""

    def __init__(self, path: str, gate: Optional[Callable[[], None]] = None) -> None:
        super().__init__(path)
        self.gate = gate
        self.spawns = 0
        self.commands: List[Tuple[str, ...]] = []
        self._lock = threading.Lock()

    def spawn(self, argv: Any, **kw: Any) -> Any:
        with self._lock:
            self.spawns += 1
        if self.gate is not None:
            self.gate()
        return super().spawn(argv, **kw)

    def exec(self, argv: Any, **kw: Any) -> Any:
        with self._lock:
            self.commands.append(tuple(argv))
        return super().exec(argv, **kw)

    def template_checks(self) -> int:
        """How many times the bridge program's template check started an interpreter."""
        return sum(1 for argv in self.commands if "bridge_client.bridge.server" in " ".join(argv))


def _key(session: Any) -> Tuple[str, str]:
    return (session.sandbox.id, session._plan.state_dir)


def _wait_for_waiters(session: Any, count: int) -> Callable[[], None]:
    """A gate that holds the leader's spawn until ``count`` other threads wait for it."""

    def gate() -> None:
        assert wait_until(lambda: launcher._flights.waiters(_key(session)) >= count, timeout=60.0), (
            f"only {launcher._flights.waiters(_key(session))} threads wait for the launch"
        )

    return gate


def _log(session: Any) -> str:
    path = os.path.join(session._plan.state_dir, identity.LOG_FILE)
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _first_text(session: Any) -> str:
    for part in session.turn("hello"):
        if isinstance(part, bc.TextDelta):
            return part.text
    raise AssertionError("no text part")


def test_c05_hundred_threads_on_one_sandbox_spawn_one_bridge_and_check_the_template_once(workspace):
    sandbox = CountingSandbox(workspace)
    opts = options("echo")
    sessions = [bc.create_session(opts, session_options(sandbox)) for _ in range(100)]
    sandbox.gate = _wait_for_waiters(sessions[0], 99)  # all 100 are in connect() together
    results: List[Any] = [None] * 100

    def run(i: int) -> None:
        try:
            results[i] = _first_text(sessions[i])
        except BaseException as exc:  # noqa: B036 - reported below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=150)
        assert [r for r in results if not isinstance(r, str)] == []
        assert sandbox.spawns == 1
        # No interpreter started for the check: the bridge said it listens at this version,
        # which proves the step, and left its marker for the next launch.
        assert sandbox.template_checks() == 0
        step = opts.template.steps[0]
        assert open(step.marker_path(sandbox), "rb").read() == step.marker()
        log = _log(sessions[0])
        assert log.count("listening on") == 1
        assert "holds the lock" not in log
        assert len({s._hello.instance for s in sessions}) == 1
    finally:
        for session in sessions:
            session.release()


class _FailOnceStep:
    """A template step (its own ``run``) that fails the first time, after ``gate()``."""

    name = "a step that fails once"
    remember = False

    def __init__(self) -> None:
        self.runs = 0
        self.gate: Callable[[], None] = lambda: None

    def run(self, sandbox: Any) -> None:
        self.runs += 1
        if self.runs == 1:
            self.gate()
            raise bc.TemplateError("broken on purpose", step=self.name, output="the output")


def test_c04_a_bridge_program_of_another_version_is_stopped_and_the_template_runs(workspace):
    import dataclasses

    from bridge_client.sandbox import wheelhouse

    sandbox = CountingSandbox(workspace)
    # The step says it installs 99.0.0; the bridge that starts says this package's version.
    step = dataclasses.replace(wheelhouse.WheelStep.for_python(sys.executable), bridge_version="99.0.0")
    base = options("echo")
    opts = bc.BridgeOptions(
        id="echo", template=bc.Template((step,)), command=base.command, args=base.args, token=base.token
    )
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _first_text(session)
        log = _log(session)
    assert sandbox.spawns == 2, "the first bridge was stopped, the second launched after the check"
    assert sandbox.template_checks() == 1
    assert log.count("listening on") == 2 and "shutting down: SIGTERM" in log


def test_c05_a_failed_launch_fails_every_waiter_alike_and_the_next_call_tries_again(sandbox):
    step = _FailOnceStep()
    base = options("echo")
    opts = bc.BridgeOptions(
        id="echo", template=bc.Template((step,)), command=base.command, args=base.args,  # type: ignore[arg-type]
        token=base.token,
    )
    sessions = [bc.create_session(opts, session_options(sandbox)) for _ in range(10)]
    step.gate = _wait_for_waiters(sessions[0], 9)
    errors: List[Any] = [None] * 10

    def run(i: int) -> None:
        try:
            sessions[i].turn("hello")
        except BaseException as exc:  # noqa: B036 - compared below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(10)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert step.runs == 1
        assert all(type(e) is bc.TemplateError for e in errors), errors
        assert len({(str(e), e.step, e.output) for e in errors}) == 1
        assert "broken on purpose" in str(errors[0]) and errors[0].output == "the output"
        assert len({id(e) for e in errors}) == 10, "each waiter raises its own copy"
        # The next call launches again, and this time the step passes.
        with bc.create_session(opts, session_options(sandbox)) as again:
            assert _first_text(again)
        assert step.runs == 2
    finally:
        for session in sessions:
            session.release()


def test_c04_the_launcher_wakes_on_the_bridge_notice_not_a_poll(sandbox, monkeypatch):
    # With the fallback look pushed beyond the launch timeout, only the bridge's notice can
    # wake the launcher in time.
    monkeypatch.setattr(launcher, "_NOTICE_FALLBACK", 60.0)
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=30)) as session:
        assert _first_text(session)


class _Plain:
    """A spawn handle with only ``pid`` and ``poll()``, as Docker's and SSH's."""

    def __init__(self, process: Any) -> None:
        self._process = process

    @property
    def pid(self) -> Any:
        return self._process.pid

    def poll(self) -> Any:
        return self._process.poll()


class _NoNoticeSandbox(CountingSandbox):
    """A sandbox whose spawn has no output the host can read."""

    spawn_notice = False

    def spawn(self, argv: Any, **kw: Any) -> Any:
        return _Plain(super().spawn(argv, **kw))


class _SaysNothingSandbox(_NoNoticeSandbox):
    """One that claims a notice its handles do not carry (a subclass that wraps them, say)."""

    spawn_notice = True


def test_c04_a_sandbox_without_notices_is_polled_and_checks_the_template(workspace):
    sandbox = _NoNoticeSandbox(workspace)
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        assert _first_text(session)
    assert sandbox.template_checks() == 1 and sandbox.spawns == 1


def test_c04_a_bridge_that_gives_no_notice_does_not_prove_the_template(workspace):
    sandbox = _SaysNothingSandbox(workspace)
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        assert _first_text(session)
    # Launched on the notice's promise, found without one: stopped, checked, launched again.
    assert sandbox.template_checks() == 1 and sandbox.spawns == 2


def test_c05_a_bridge_that_loses_the_lock_waits_for_the_winner_and_says_so(sandbox):
    session = bc.create_session(options("echo"), session_options(sandbox))
    plan = session._plan
    listening = os.path.join(plan.state_dir, identity.LISTENING_FILE)
    first, second = launcher.launch(plan), launcher.launch(plan)
    seen = {}

    def read(name: str, process: Any) -> None:
        notice = process.wait_notice(30.0)
        seen[name] = (notice, os.path.exists(listening))

    threads = [threading.Thread(target=read, args=(n, p)) for n, p in (("a", first), ("b", second))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=40)
        assert sorted(notice.split()[0] for notice, _ in seen.values()) == ["listening", "locked"]
        assert all(present for _, present in seen.values()), "each says so once the file is there"
        loser = first if seen["a"][0].startswith("locked") else second
        assert wait_until(lambda: loser.poll() is not None, timeout=10) and loser.poll() == 0
        log = _log(session)
        assert log.count("listening on") == 1 and log.count("holds the lock") == 1
        with session:
            assert _first_text(session)
            winner = first if loser is second else second
            assert session._hello.pid == winner.pid
    finally:
        session.release()


def _install_counting_template(flag: str, counter: str) -> bc.Template:
    step = bc.TemplateStep(
        name="the flag",
        check=("test", "-f", flag),
        install=("sh", "-c", f"echo run >> {counter}; touch {flag}"),
        remember=True,
    )
    return bc.Template((step,))


def _flag_options(flag: str, counter: str) -> bc.BridgeOptions:
    """A bridge that cannot start without the flag file the template installs."""
    base = options("echo")
    script = f"test -f {flag} || exit 5; exec {sys.executable} -m bridge_client.bridge --driver echo"
    return bc.BridgeOptions(
        id="echo", template=_install_counting_template(flag, counter), command="/bin/sh",
        args=("-c", script), token=base.token, bridge_idle_timeout=60.0,
    )


def _stop_bridge(session: Any) -> None:
    pid = session._hello.pid
    path = os.path.join(session._plan.state_dir, identity.LISTENING_FILE)
    session.release()
    os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: not os.path.exists(path), timeout=20)


def _runs(counter: str) -> int:
    try:
        with open(counter) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


def test_c04_a_remembered_step_is_not_checked_again_while_its_marker_is_there(workspace, tmp_path):
    sandbox = CountingSandbox(workspace)
    flag, counter = str(tmp_path / "flag"), str(tmp_path / "runs")
    opts = _flag_options(flag, counter)
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _first_text(session)
        _stop_bridge(session)
    checks = [argv for argv in sandbox.commands if argv[:1] == ("test",)]
    assert len(checks) == 2 and _runs(counter) == 1  # check, install, check again
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _first_text(session)
    assert [argv for argv in sandbox.commands if argv[:1] == ("test",)] == checks, "no check: the marker"
    assert sandbox.spawns == 2


def test_c04_a_sandbox_that_lost_what_the_marker_says_gets_it_again(workspace, tmp_path):
    sandbox = CountingSandbox(workspace)
    flag, counter = str(tmp_path / "flag"), str(tmp_path / "runs")
    opts = _flag_options(flag, counter)
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _first_text(session)
        _stop_bridge(session)
    os.unlink(flag)  # the sandbox lost what was installed; the marker still says it is there
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _first_text(session)
    assert _runs(counter) == 2, "the bridge could not start: the template ran in full and installed"
    assert sandbox.spawns == 3  # the first launch, the one that failed, the one after the install


def _checks_of(sandbox: CountingSandbox, step: bc.TemplateStep) -> int:
    return sum(1 for argv in sandbox.commands if argv == tuple(step.check))


def test_c04_a_missing_or_different_marker_runs_the_check(workspace):
    sandbox = CountingSandbox(workspace)
    step = bc.TemplateStep("a thing", check=("true",), install=("false",), remember=True)
    template = bc.Template((step,))
    assert template.run(sandbox) is False and _checks_of(sandbox, step) == 1
    assert template.run(sandbox) is True and _checks_of(sandbox, step) == 1  # the marker
    with open(step.marker_path(sandbox), "wb") as f:
        f.write(b"{}")  # not what this step would write: another version's, a damaged one
    assert template.run(sandbox) is False and _checks_of(sandbox, step) == 2
    os.unlink(step.marker_path(sandbox))
    assert template.run(sandbox) is False and _checks_of(sandbox, step) == 3
    assert template.run(sandbox, recheck=True) is False and _checks_of(sandbox, step) == 4


def test_c04_another_package_version_has_another_marker(workspace, monkeypatch):
    from bridge_client.sandbox import wheelhouse

    sandbox = CountingSandbox(workspace)
    ours = wheelhouse.WheelStep.for_python(sys.executable)
    bc.Template((ours,)).run(sandbox)  # this package is importable by this interpreter
    assert sandbox.template_checks() == 1
    bc.Template((ours,)).run(sandbox)
    assert sandbox.template_checks() == 1
    monkeypatch.setattr(wheelhouse, "__version__", "99.0.0")
    theirs = wheelhouse.WheelStep.for_python(sys.executable)
    assert theirs.marker_path(sandbox) != ours.marker_path(sandbox)
    monkeypatch.setattr(sandbox, "exec", _answer_checks_with_success(sandbox))
    bc.Template((theirs,)).run(sandbox)  # checked again (and, here, told it is installed)
    assert sandbox.template_checks() == 2


def _answer_checks_with_success(sandbox: CountingSandbox) -> Callable[..., Any]:
    from bridge_client.sandbox.base import ExecResult

    def exec_(argv: Any, **kw: Any) -> Any:
        sandbox.commands.append(tuple(argv))
        return ExecResult(0)

    return exec_


@pytest.mark.parametrize("flaw", ["readable-by-others", "symlink"])
def test_c21_an_untrusted_marker_counts_as_none(workspace, tmp_path, flaw):
    sandbox = CountingSandbox(workspace)
    step = bc.TemplateStep("a thing", check=("true",), install=("false",), remember=True)
    template = bc.Template((step,))
    template.run(sandbox)
    path = step.marker_path(sandbox)
    if flaw == "readable-by-others":
        os.chmod(path, 0o644)
    else:
        target = tmp_path / "planted"
        target.write_bytes(open(path, "rb").read())
        os.unlink(path)
        os.symlink(target, path)
    assert template.run(sandbox) is False and _checks_of(sandbox, step) == 2
    assert template.run(sandbox) is True, "the marker written again is trusted"
