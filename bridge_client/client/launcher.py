"""Find the bridge, or launch it.

:func:`connect` finds the bridge (:mod:`.finder`: it reads the listening file, exposes its
port, connects and checks with ``Hello`` that the bridge of this agent id and bridge id
answers). When none answers (no
file, a bad file, refused, timed out, another program on that port, another bridge) it runs
the template, writes the launch file and the token, spawns the bridge detached, and waits for
a fresh listening file whose bridge answers. One thread of a host process launches a given
bridge at a time (:mod:`.flights`); the others wait for it.
"""
from __future__ import annotations

import functools
import logging
import signal
import time
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from ..state_dir import identity
from ..state_dir.unwritable import NOTICE_WORD, UNWRITABLE_ERRNOS, UNWRITABLE_EXIT
from ..errors import (
    BridgeLaunchError,
    HarnessError,
    SandboxGone,
    Unauthorized,
    UntrustedFile,
)
from ..template import Template, TemplateStep
from ..wire.parts import HelloResult
from .connection import Connection
from .finder import _check_hello  # noqa: F401 - where tests and tools have looked for it
from .finder import LaunchPlan, _find_or_refused, _listening_bytes, find, read_state_file
from .flights import Flight, SingleFlight
from .resend import Backoff

__all__ = ["LaunchPlan", "connect", "find", "launch", "read_state_file"]

log = logging.getLogger("bridge_client")

_LOG_TAIL_BYTES = 4000
_POLL_FIRST = 0.02  # seconds between looks at the listening file while a bridge starts...
_POLL_MAX = 0.05  # ...growing to this (a look is one small file read; a longer pause is late news)
_RELAUNCH_AFTER = 3.0  # seconds a lock holder may stay silent before we launch again (doubling)
_NOTICE_FALLBACK = 0.1  # seconds between looks while a notice may still come (it wakes us first)
_FAILED_START_RELAUNCHES = 1  # launches after a bridge that exited or was killed before it answered


def _signal_name(number: int) -> Optional[str]:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _ended(status: int) -> str:
    """How a bridge process ended, for a message: ``exited with status 1``, ``was killed
    by signal -11 (SIGSEGV)`` for a ``Popen``-style negative status, and for a status a
    shell gives a death by a signal (128 + its number: a remote sandbox's spawn runs the
    bridge under ``sh``) ``exited with status 139 (a shell's report of SIGSEGV)``."""
    if status < 0:
        name = _signal_name(-status)
        return f"was killed by signal {status}" + (f" ({name})" if name else "")
    name = _signal_name(status - 128) if 128 < status < 128 + 65 else None
    return f"exited with status {status}" + (f" (a shell's report of {name})" if name else "")


def _log_tail(plan: LaunchPlan) -> str:
    try:
        data = plan.sandbox.read_file(plan.path(identity.LOG_FILE))
    except (OSError, HarnessError):
        return ""
    return data[-_LOG_TAIL_BYTES:].decode("utf-8", "replace").strip()


def launch(plan: LaunchPlan, recheck: bool = False) -> Any:
    """Run the template, write ``launch.json`` and ``token`` (mode 0600), and spawn the
    bridge detached from the host, with the workspace as its working folder.

    Args:
        recheck: run every template step's check, even where a marker says the sandbox has
            what the step installs.

    Returns:
        The :class:`~bridge_client.sandbox.base.SpawnedProcess` handle.

    Raises:
        TemplateError: an install step failed.
        SandboxGone: the sandbox is gone.
        BridgeLaunchError: the bridge program could not be started.
    """
    return _launch(plan, recheck).process


class _Launched(NamedTuple):
    """A launch: the spawned process; whether a template step was skipped on a marker's (or
    the coming bridge's) word; the steps skipped until the bridge proves them."""

    process: Any
    trusted: bool
    deferred: Tuple[TemplateStep, ...]


def _launch(plan: LaunchPlan, recheck: bool = False) -> _Launched:
    """:func:`launch`, saying what the template skipped. Where the spawn carries the bridge's
    notice, the bridge program's own step (no marker yet) is skipped: the bridge that says
    it listens at the host's version proves it, and one that cannot start has it run."""
    deferred: Tuple[TemplateStep, ...] = ()
    if getattr(plan.sandbox, "spawn_notice", False) is True and not recheck:
        deferred = tuple(s for s in plan.template.steps if getattr(s, "proven_by_bridge", False))
    trusted = bool(plan.template.run(plan.sandbox, recheck=recheck, defer=deferred))
    launch_info = identity.LaunchInfo(
        agent_id=plan.agent_id,
        bridge_id=plan.bridge_id,
        agent_options=plan.agent_options,
        idle_timeout=plan.bridge_idle_timeout,
        bind=plan.bind,
    )
    try:
        plan.sandbox.write_file(plan.path(identity.LAUNCH_FILE), launch_info.to_json().encode(), mode=0o600)
        plan.sandbox.write_file(plan.path(identity.TOKEN_FILE), plan.token.reveal().encode(), mode=0o600)
    except UntrustedFile as exc:
        raise BridgeLaunchError(f"refusing the bridge's state directory {plan.state_dir}: {exc}") from None
    except OSError as exc:
        if exc.errno in UNWRITABLE_ERRNOS:
            raise _unwritable(plan, exc.strerror or str(exc)) from exc
        raise BridgeLaunchError(
            f"cannot write the bridge's state directory {plan.state_dir}: {exc}"
        ) from None
    argv: Sequence[str] = [plan.command, *plan.args]
    log.debug("launching bridge %s: %s", plan.bridge_id, " ".join(argv))
    # A sandbox whose spawn can carry the bridge's "I listen" line back (a pipe) spares the
    # launcher a polling lag; others are polled (see connect).
    try:
        process = plan.sandbox.spawn(
            argv,
            env={identity.STATE_DIR_ENV: plan.state_dir},
            log_path=plan.path(identity.LOG_FILE),
        )
    except SandboxGone:
        raise
    except UntrustedFile as exc:  # bridge.log (or its folder) is a symlink or another user's
        raise BridgeLaunchError(f"refusing the bridge's state directory {plan.state_dir}: {exc}") from None
    except OSError as exc:
        raise BridgeLaunchError(f"cannot start the bridge program {plan.command!r}: {exc}") from None
    return _Launched(process, trusted, deferred)


def _unwritable(plan: LaunchPlan, reason: str, log_tail: str = "") -> BridgeLaunchError:
    """The launch error of a state directory that takes no more writes (not worth a relaunch)."""
    return BridgeLaunchError(
        f"the bridge's state directory {plan.state_dir} cannot be written ({reason}): the disk is "
        "full, over quota or read-only. Nothing the bridge committed is lost: free space there "
        "and try again (a turn being read goes on when iterated again, or with continue_turn)",
        log_tail,
        unwritable=True,
    )


def _unwritable_exit(plan: LaunchPlan, process: Any, pause: "_Pause") -> BridgeLaunchError:
    """The launch error of a bridge that exited with ``UNWRITABLE_EXIT``: the reason from its
    notice line when it wrote one (its ``bridge.log`` is on the full disk)."""
    notice = pause.notice
    if notice is None and pause.listening_for_notice:
        notice = process.wait_notice(0.0)
    word, _, reason = (notice or "").partition(" ")
    if word != NOTICE_WORD or not reason:
        reason = f"the bridge exited with status {UNWRITABLE_EXIT}"
    return _unwritable(plan, reason, _log_tail(plan))


_PROOF_WAIT = 2.0  # seconds to wait for the notice of a bridge found before it was read


def _proven(
    plan: LaunchPlan, launched: _Launched, pause: "_Pause", hello: HelloResult
) -> Optional[bool]:
    """Whether the bridge found proves the template steps deferred to it: ``True`` (their
    markers are left), ``False`` (the bridge we launched says another version, or nothing
    although it answers: the sandbox has another bridge program; stop it and run the
    template), ``None`` (another host's bridge answers; ours lost the lock: nothing to learn).
    A bridge we cannot tell apart (no notice, another pid) has the deferred steps checked now."""
    if not launched.deferred:
        return True
    notice = pause.notice
    if notice is None and pause.listening_for_notice:
        notice = launched.process.wait_notice(_PROOF_WAIT)
    word, _, version = (notice or "").partition(" ")
    if word == "listening":
        if all(getattr(s, "bridge_version", None) == version for s in launched.deferred):
            plan.template.remember(plan.sandbox, launched.deferred)
            return True
        return False
    if word == "locked":
        return None
    if hello.pid == launched.process.pid:
        return False
    Template(launched.deferred).run(plan.sandbox, recheck=True)
    return True


def _stop(process: Any) -> None:
    """Stop a bridge we launched that must not serve (it is another version), and wait
    (at most 10 s) for it to exit."""
    terminate = getattr(process, "terminate", None)
    if callable(terminate):
        terminate()
    deadline = time.monotonic() + 10.0
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


class _Pause:
    """The launcher's wait between looks at the listening file: on the launched bridge's
    notice when its spawn carries one (woken at once when it says it listens, lost the lock,
    or exits), else a sleep."""

    def __init__(self, process: Any) -> None:
        wait = getattr(process, "wait_notice", None)
        self._wait = wait if callable(wait) else None
        self.notice: Optional[str] = None

    @property
    def listening_for_notice(self) -> bool:
        """True while a notice may still come."""
        return self._wait is not None

    def __call__(self, seconds: float) -> None:
        if self._wait is None:
            time.sleep(seconds)
            return
        notice = self._wait(seconds)
        if notice is not None:  # a line, or "" when the bridge closed its end (it exited)
            self.notice, self._wait = notice, None


def connect(
    plan: LaunchPlan, timeout: Optional[float] = None, holder: Optional[List[Connection]] = None
) -> Tuple[Connection, HelloResult]:
    """Find the bridge or launch it, and return a connection to it.

    Waits up to ``plan.launch_timeout`` seconds for a launched bridge (monotonic clock). With
    ``timeout`` (the rest of a resend window), the whole call, the look before the launch and
    every ``Hello`` included, ends within ``timeout`` seconds (plus one last look of at most
    0.05 s, and the template's run). ``holder``: see :func:`find`.

    In one host process, one thread launches a given bridge (sandbox and bridge id) at a
    time: threads that find no bridge while another launches it wait for that launch and
    then connect to the bridge it started; a launch that fails raises the same error in all
    of them, and the next call tries again.

    When several hosts launch at once, the bridges that lose the lock wait for the winner to
    listen, then exit quietly, and every host ends up connected to the winner. When the
    bridge that holds the lock goes away without anyone answering (it was shutting down), it
    launches again, only once its own launched bridge has exited, after 3 s, then 6 s,
    12 s... When its own bridge dies before it answers, it first looks for the bridge that
    answers now (another host's). Otherwise the death is a failed start, launched again at
    most once: when it was killed by a signal (it may have been killed while it held the lock)
    or the template had been skipped on a marker's word (it is then run in full first: the
    sandbox may have lost what it installed). A failed start with no launch left is a
    ``BridgeLaunchError`` that says how the bridge ended (``exited with status 1``, ``was
    killed by signal -11 (SIGSEGV)``) with the tail of ``bridge.log``: a bridge that crashes
    at every start is launched twice, not for the whole ``launch_timeout``. A bridge that exits 3 (its state
    directory cannot be written: a full disk) is ``BridgeLaunchError(unwritable=True)`` at
    once, as are launch files that cannot be written for lack of space.

    A sandbox whose spawn carries the bridge's notice (``LocalSandbox``) wakes the launcher
    the moment its bridge listens; elsewhere the listening file is read every 20-50 ms while
    a bridge starts. Either way the listening file is what is trusted: the port it names is
    probed at once when the file changes, and with the resend policy's backoff (up to 2 s
    apart) while it stays the same and does not answer. A listening file that is not the
    sandbox user's own private file counts as no bridge (logged at WARNING).

    A 401 from the port in the listening file is not taken at its word: the file may be stale
    (its bridge was SIGKILLed) and the port now another sandbox's bridge. So a launch is
    tried: a launched bridge takes the state directory's lock when the old one is dead and
    writes a fresh listening file. Only when the launched bridge lost the lock (a live bridge
    holds it) and the port still refuses the token for ``_RELAUNCH_AFTER`` seconds is it
    ``Unauthorized``.

    Raises:
        Unauthorized: the live bridge of this state directory refused the token.
        BridgeLaunchError: the launched bridge exited with an error or was killed by a signal
            (at its launch and its relaunch), or did not answer in time (with the tail of
            ``bridge.log``).
        TemplateError: an install step failed.
        SandboxGone: the sandbox is gone.
    """
    budget = plan.launch_timeout if timeout is None else min(plan.launch_timeout, timeout)
    window_end = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    # The first look is bounded too: a frozen bridge accepts TCP and then says nothing.
    found, refused = _find_or_refused(
        plan, min(plan.open_timeout, max(budget, 0.05)), None, holder, window_end
    )
    if found is not None:
        return found
    key = (plan.sandbox.id, plan.state_dir)
    give_up: Optional[float] = None

    def limit(flight: Flight) -> Optional[float]:
        # A waiter waits as long as the launcher would: the template's run, then the budget.
        ends = [] if window_end is None else [window_end]
        if flight.launched_at is not None:
            ends.append(flight.launched_at + budget)
        return min(ends) if ends else None

    while True:
        lead = functools.partial(_launch_and_wait, plan, budget, window_end, holder, refused)
        try:
            led = _flights.run(key, lead, limit)
        except TimeoutError:
            message = f"the bridge did not answer within {budget:g} s"
            raise BridgeLaunchError(message, _log_tail(plan)) from None
        if led is not None:
            return led
        # Another thread launched the bridge (or was interrupted): connect to what answers.
        now = time.monotonic()
        remaining = budget if window_end is None else window_end - now
        found = find(plan, open_timeout=max(0.05, min(plan.open_timeout, remaining)), holder=holder,
                     deadline=window_end)
        if found is not None:
            return found
        give_up = give_up if give_up is not None else now + budget
        if now >= give_up or remaining <= 0:
            raise BridgeLaunchError(f"the bridge did not answer within {budget:g} s", _log_tail(plan))
        refused = None


_flights: "SingleFlight[Tuple[Connection, HelloResult]]" = SingleFlight()


def _launch_and_wait(
    plan: LaunchPlan,
    budget: float,
    window_end: Optional[float],
    holder: Optional[List[Connection]],
    refused: "Optional[Tuple[bytes, Unauthorized]]",
    flight: Flight,
) -> Tuple[Connection, HelloResult]:
    """Launch the bridge and wait for it (or the lock holder) to answer: see :func:`connect`."""
    launched = _launch(plan)
    flight.launched_at = time.monotonic()
    deadline = flight.launched_at + budget
    if window_end is not None:
        deadline = min(deadline, window_end)
    pause = _Pause(launched.process)
    wait = _POLL_FIRST
    lost_at: Optional[float] = None
    relaunch_after = _RELAUNCH_AFTER
    # The port named by an unchanged listening file is probed with the resend policy's
    # backoff; a new file is probed at once (a starting bridge is found without delay).
    probes = Backoff()
    probed: Optional[bytes] = None
    next_probe = 0.0
    failed_starts = 0
    while True:
        remaining = deadline - time.monotonic()
        data = _listening_bytes(plan)
        now = time.monotonic()
        if data is None:
            refused = None  # the refused file is gone
        elif data != probed or now >= next_probe:
            if data != probed:
                probes.reset()
            found, refused = _find_or_refused(
                plan, max(0.05, min(plan.open_timeout, remaining)), refused, holder, window_end
            )
            if found is not None:
                if _proven(plan, launched, pause, found[1]) is False:
                    # The sandbox's bridge program is not this version: install it, relaunch.
                    log.debug("bridge %s is another version; running the template in full", plan.bridge_id)
                    found[0].close()
                    _stop(launched.process)
                    launched = _launch(plan, recheck=True)
                    pause, lost_at, probed = _Pause(launched.process), None, None
                    continue
                log.debug("bridge %s answers (pid %d)", plan.bridge_id, found[1].pid)
                return found
            probed, next_probe = data, time.monotonic() + probes.next()
        status = launched.process.poll()
        if status == UNWRITABLE_EXIT:
            # No relaunch can help (the template cannot free space): say so at once.
            raise _unwritable_exit(plan, launched.process, pause)
        if status is not None and status != 0:
            # Ours died. Another host's bridge may hold the lock now and answer: look
            # before giving up. Killed by a signal, it may have held the lock: launch again.
            found = _look_now(plan, remaining, holder, window_end)
            if found is not None:
                return found
            # A failed start (an error exit, or a death by a signal: a crash, an OOM killer,
            # a kill while it held the lock) is launched again at most once per connect.
            again = failed_starts < _FAILED_START_RELAUNCHES and remaining > 0
            failed_starts += 1
            if again and (status < 0 or launched.trusted):
                # Killed, it may have held the lock; the template was skipped on a marker's
                # (or this bridge's) word: the sandbox may lack what it installs (check it all).
                check = " after checking the template in full" if launched.trusted else ""
                log.debug("bridge %s: the launched bridge %s; launching again%s",
                          plan.bridge_id, _ended(status), check)
                launched = _launch(plan, recheck=launched.trusted)
                pause, lost_at, probed = _Pause(launched.process), None, None
                continue
            launches = "" if failed_starts == 1 else f" (at each of {failed_starts} launches)"
            raise BridgeLaunchError(
                f"the bridge {_ended(status)} before it answered{launches}", _log_tail(plan)
            )
        if status == 0:
            # Ours lost the lock race: the winner answers soon. If none does for a
            # while, the lock holder was on its way out: launch again, less often each time.
            if lost_at is None:
                lost_at = now
            elif now - lost_at > relaunch_after:
                if refused is not None:  # a live bridge holds the lock and refuses our token
                    raise refused[1]
                log.debug("bridge %s: the lock holder does not answer; launching again", plan.bridge_id)
                launched = _launch(plan)
                pause, lost_at = _Pause(launched.process), None
                relaunch_after *= 2
        if remaining <= 0:
            if refused is not None and status == 0:
                raise refused[1]
            raise BridgeLaunchError(f"the bridge did not answer within {budget:g} s", _log_tail(plan))
        if pause.listening_for_notice:
            # The notice wakes us; the bounded wait is for a bridge that never sends one.
            pause(min(_NOTICE_FALLBACK, max(0.0, remaining)))
        else:
            pause(min(wait, max(0.0, remaining)))
            wait = min(wait * 1.5, _POLL_MAX)


def _look_now(
    plan: LaunchPlan, remaining: float, holder: Optional[List[Connection]], window_end: Optional[float]
) -> Optional[Tuple[Connection, HelloResult]]:
    """One look for the bridge that answers now, whatever the probe backoff says."""
    try:
        return find(plan, open_timeout=max(0.05, min(plan.open_timeout, remaining)), holder=holder,
                    deadline=window_end)
    except Unauthorized as exc:
        log.debug("bridge %s: the port in the listening file refused the token: %s", plan.bridge_id, exc)
        return None
