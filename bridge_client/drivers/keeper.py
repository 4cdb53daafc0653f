"""*Keepers*: what keeps a driver's child processes in order when the bridge is gone, however
it died. A bridge that is SIGKILLed cannot end or wait for its children, and a child in its own
session outlives it. Two kinds of children, two policies, one module:

- **Agent processes** (an agent CLI, an ACP agent) are killed. A driver starts a
  :class:`ProcessKeeper` with its first child: a small Python process in its own session that
  reads the process group of every running child from a pipe (``+PGID`` when it starts,
  ``-PGID`` once reaped). When the pipe reaches end of file, that is when the bridge is gone,
  the keeper SIGKILLs every group still listed and exits. A closing driver closes the pipe
  after ending its children itself (the keeper then has nothing left to do).
- **Commands run for the agent** (the ``shell`` driver's commands, the ``openai`` driver's
  ``run_command``) run at most once: a :class:`KeptCommand` runs each under a keeper of its
  own, a small Python process in its own session that is the command's parent, so the command
  goes on to its end when the bridge dies, and its output and exit status are recorded in a
  folder of the bridge's state directory (``commands/<turn hash>/<hash>/``: ``output``,
  then ``status.json`` written atomically once it ended; the turn's folders are removed once
  its ``turn-finish`` is committed, :meth:`KeptCommand.forget_turn`). The driver's step that is run again in
  the next bridge finds the folder (:meth:`KeptCommand.adopt`, by the session, turn, tool call
  and command) and takes that command's result instead of starting it again: it waits for a
  command still running, reads the output of one that ended, and reports one whose keeper is
  gone too (the sandbox was stopped) as *interrupted*. The folder's ``lock`` is held (an
  ``flock``) by the bridge from before the keeper starts, then by the keeper for as long as it
  lives: a free lock and no ``status.json`` means the keeper is gone; a folder without
  ``output`` means the command never started (it may then run, as a first run).
"""
from __future__ import annotations

import codecs
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Callable, Dict, Mapping, Optional, Sequence

__all__ = ["ProcessKeeper", "KeptCommand", "interrupted_message"]

_ENV_PREFIX = "BRIDGE_CLIENT_"

log = logging.getLogger("bridge_client.drivers.keeper")

_KEEPER = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] == "+" and line[1:].isdigit():
        groups.add(int(line[1:]))
    elif line[:1] == "-" and line[1:].isdigit():
        groups.discard(int(line[1:]))
def tree():
    # The processes of the listed groups and all their descendants (a child that made a
    # session of its own, as an agent CLI's tool often does, is no longer in its group).
    parent, group = {}, {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for e in entries:
        if e.isdigit():
            try:
                with open("/proc/" + e + "/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                parent[int(e)], group[int(e)] = int(rest[1]), int(rest[2])
            except (OSError, ValueError, IndexError):
                pass
    found = {p for p, g in group.items() if g in groups}
    grew = True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in found and p not in found:
                found.add(p)
                grew = True
    found.discard(os.getpid())
    return found
stopped = set()
for _ in range(5):  # stop the tree first, so that nothing forks or is orphaned meanwhile
    new = tree() - stopped
    if not new:
        break
    for pid in new:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    stopped |= new
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for pid in stopped:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
"""The keeper's program: the groups listed when its stdin ends are killed (see the module),
and every descendant of their processes too, stopped first (SIGSTOP) so that none forks or
is orphaned meanwhile: a child that made a session of its own (an agent CLI's tool often
does) dies with its parent's group."""


class ProcessKeeper:
    """The keeper process of one driver (see the module's docstring). Thread-safe; a keeper
    that cannot start or has died is logged once and then left alone: the processes still
    run, only the protection against a SIGKILLed bridge is missing.

    Args:
        what: what it keeps, for log messages (``"shell commands"``, ``"ACP agents"``).
    """

    def __init__(self, what: str = "processes") -> None:
        self._what = what
        self._lock = threading.Lock()
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._pipe: Optional[IO[bytes]] = None
        self._failed = False

    def _start(self) -> None:
        # Caller holds the lock. Its own session: a signal to the bridge's group spares it.
        # Its stdin's write end is close-on-exec: the commands do not hold it open.
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _KEEPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX)},
            )
            self._pipe = self._proc.stdin
        except OSError as exc:
            self._fail(f"cannot start the keeper of {self._what}: {exc}")

    def _fail(self, message: str) -> None:
        if not self._failed:
            log.warning("%s; a SIGKILLed bridge may leave %s running", message, self._what)
        self._failed = True
        self._pipe = None

    def _say(self, line: str) -> None:
        with self._lock:
            if self._pipe is None and not self._failed and self._proc is None:
                self._start()
            if self._pipe is None:
                return
            try:
                self._pipe.write(line.encode("ascii") + b"\n")
                self._pipe.flush()
            except (OSError, ValueError) as exc:
                self._fail(f"the keeper of {self._what} is gone: {exc}")

    def started(self, group: int) -> None:
        """A command runs in process group ``group``."""
        self._say(f"+{group}")

    def ended(self, group: int) -> None:
        """The command of ``group`` was reaped (or its group killed)."""
        self._say(f"-{group}")

    def close(self) -> None:
        """Close the pipe and reap the keeper (idempotent)."""
        with self._lock:
            pipe, proc, self._pipe, self._proc = self._pipe, self._proc, None, None
            self._failed = True  # no new keeper after close
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
        if proc is not None:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------- kept commands

_RUNNER = r"""
import json, os, signal, subprocess, sys, time
folder, timeout, grace, lock = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
argv = sys.argv[5:]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
def put(name, data):
    tmp = os.path.join(folder, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, name))
    d = os.open(folder, os.O_RDONLY)
    os.fsync(d)
    os.close(d)
put("keeper.json", {"pid": os.getpid()})
out = os.open(os.path.join(folder, "output"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
try:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
except OSError as exc:
    put("status.json", {"error": str(exc.strerror or exc)})
    sys.exit(0)
def kill(sig):
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass
deadline = time.monotonic() + timeout
timed_out = cancelled = False
while True:
    try:
        code = proc.wait(0.05)
        break
    except subprocess.TimeoutExpired:
        pass
    if stop or time.monotonic() >= deadline:
        cancelled, timed_out = bool(stop), not stop
        kill(signal.SIGTERM)
        try:
            code = proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill(signal.SIGKILL)
            code = proc.wait()
        break
os.fsync(out)
put("status.json", {"exitCode": code, "timedOut": timed_out, "cancelled": cancelled})
"""
"""The keeper of one command (see the module): argv ``FOLDER TIMEOUT GRACE LOCK_FD COMMAND...``."""

_TICK = 0.05
"""Seconds between two looks at a kept command (its output, its status, the cancel event)."""


def interrupted_message() -> str:
    """What the agent is told of a command whose keeper is gone without its status."""
    return (
        "The command was interrupted: the bridge and the process that kept the command stopped"
        " before it ended. It may have run in part or to the end; check its effects before you"
        " run it again."
    )


class KeptCommand:
    """One command run under a keeper of its own, so that it runs at most once across bridge
    deaths (see the module's docstring). Made by :meth:`start` (a new run) or :meth:`adopt`
    (the run an earlier bridge started for the same tool call); used from one thread.

    Attributes:
        folder: its record folder (``output``, ``status.json``, ``lock``, ``keeper.json``).
        adopted: whether an earlier bridge started it.
    """

    def __init__(self, folder: str, proc: "Optional[subprocess.Popen[bytes]]", temporary: bool) -> None:
        self.folder = folder
        self.adopted = proc is None
        self._proc = proc
        self._temporary = temporary
        self._offset = 0
        self._signalled = False

    @staticmethod
    def folder_for(session_id: str, turn_id: str, call_id: str, command: str) -> Optional[str]:
        """The record folder of ``command`` run for tool call ``call_id`` of a turn: a path
        under the bridge's state directory, the same in every bridge of that directory
        (``None`` outside a bridge: no state directory, nothing survives)."""
        from . import STATE_DIR  # the bridge's state directory, set before drivers are made

        if not STATE_DIR:
            return None
        key = "\0".join((call_id, command)).encode("utf-8", "surrogatepass")
        name = hashlib.sha256(key).hexdigest()[:32]
        return os.path.join(STATE_DIR, "commands", _turn_key(session_id, turn_id), name)

    @classmethod
    def start(
        cls,
        folder: Optional[str],
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        grace: float = 2.0,
    ) -> "KeptCommand":
        """Start ``argv`` in ``cwd`` with ``env``, no stdin, stdout and stderr together into
        the record, in a process group of its own, killed after ``timeout`` seconds (SIGTERM,
        then SIGKILL after ``grace``) also when the bridge is gone by then.

        Args:
            folder: its record folder (:meth:`folder_for`); ``None``: a temporary one, removed
                by :meth:`discard` (no protection against a bridge death).

        Raises:
            OSError: the folder cannot be made, or the keeper cannot start (a command that
                cannot start, a missing shell, is said in its status instead).
            RuntimeError: a keeper still runs a command in ``folder`` (adopt it instead).
        """
        temporary = folder is None
        if folder is None:
            folder = tempfile.mkdtemp(prefix="bridge-client-command-")
        else:
            os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
            shutil.rmtree(folder, ignore_errors=True)  # what is left of a run that never started
            os.makedirs(folder, mode=0o700)
        lock = os.open(os.path.join(folder, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                # Held from now on, then by the keeper, which inherits it: a bridge SIGKILLed
                # before the keeper starts frees it, with no output yet (the command never ran).
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"a command still runs under {folder}") from None
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _RUNNER, folder, repr(float(timeout)),
                 repr(float(grace)), str(lock), *argv],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(lock,),
                start_new_session=True,  # a signal to the bridge's group spares it
            )
        finally:
            os.close(lock)
        return cls(folder, proc, temporary)

    @classmethod
    def adopt(cls, folder: Optional[str]) -> "Optional[KeptCommand]":
        """The command an earlier bridge started in ``folder``: still running, ended, or
        interrupted; ``None`` when there is none (no folder, or it never started: its folder
        is removed, and the command may run as a first run)."""
        if folder is None or not os.path.isdir(folder):
            return None
        kept = cls(folder, None, False)
        if _lock_free(folder) and not os.path.exists(os.path.join(folder, "output")):
            if kept._status() is None:
                shutil.rmtree(folder, ignore_errors=True)
                return None
        return kept

    def _status(self) -> Optional[Dict[str, Any]]:
        try:
            with open(os.path.join(self.folder, "status.json"), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def poll(self) -> Optional[Dict[str, Any]]:
        """Its status once it ended: ``{"exitCode": int (negative: that signal), "timedOut",
        "cancelled"}``, ``{"error": str}`` (it could not start: the system's reason) or
        ``{"interrupted": True}`` (its keeper is gone without a status); ``None`` while it
        runs."""
        status = self._status()
        if status is not None:
            if self._proc is not None:
                self._proc.wait()  # it writes its status last: reap it
            return status
        if self._proc is not None:
            if self._proc.poll() is None:
                return None
        elif not _lock_free(self.folder):
            return None
        status = self._status()  # written just before its keeper ended
        return status if status is not None else {"interrupted": True}

    def read_output(self, limit: int = 65536) -> bytes:
        """The output that came since the last call (at most ``limit`` bytes; empty: none yet)."""
        try:
            with open(os.path.join(self.folder, "output"), "rb") as f:
                f.seek(self._offset)
                data = f.read(limit)
        except OSError:
            return b""
        self._offset += len(data)
        return data

    def cancel(self) -> None:
        """Ask its keeper to kill it (SIGTERM, SIGKILL after the grace); its status then says
        ``cancelled``. Nothing once it ended, or before its keeper is ready to take the signal
        (``keeper.json`` not written yet: call again, as :meth:`wait` does each tick)."""
        if self._signalled or self._status() is not None:
            return
        try:
            with open(os.path.join(self.folder, "keeper.json"), encoding="utf-8") as f:
                pid = json.load(f)["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # not ready: its SIGTERM handler may not be set yet
        self._signalled = True
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
            return
        try:
            if isinstance(pid, int) and not _lock_free(self.folder):
                os.kill(pid, signal.SIGTERM)
        except OSError:
            pass

    def wait(
        self, cancelled: threading.Event, on_output: Optional[Callable[[bytes], None]] = None
    ) -> Dict[str, Any]:
        """Wait for its end, handing its output to ``on_output`` as it comes (from its start,
        also for an adopted command); ``cancelled`` set cancels it. Returns :meth:`poll`'s
        status. A ``BaseException`` (``on_output`` raised) cancels it and propagates."""
        try:
            while True:
                status = self.poll()
                data = self.read_output()
                if data and on_output is not None:
                    on_output(data)
                if status is not None:
                    while data:
                        data = self.read_output()
                        if data and on_output is not None:
                            on_output(data)
                    return status
                if data:
                    continue
                if cancelled.is_set():
                    self.cancel()  # each tick until its keeper took it
                    time.sleep(_TICK)
                else:
                    cancelled.wait(_TICK)
        except BaseException:
            self.cancel()
            raise

    def output_text(self, limit: int) -> str:
        """Its whole output so far as text (UTF-8, bad bytes replaced), cut after ``limit``
        characters (the cut is said)."""
        try:
            with open(os.path.join(self.folder, "output"), "rb") as f:
                data = f.read(limit * 4 + 4)
                rest = os.fstat(f.fileno()).st_size - len(data)
        except OSError:
            return ""
        text = codecs.decode(data, "utf-8", "replace")
        cut = []
        if len(text) > limit:
            cut.append(f"{len(text) - limit} more characters cut")
            text = text[:limit]
        if rest > 0:
            cut.append(f"{rest} more bytes not read")
        return text + f"\n[... {', '.join(cut)}]" if cut else text

    def discard(self) -> None:
        """Remove a temporary record (the others go with their turn: :meth:`forget_turn`)."""
        if self._temporary:
            shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    def forget_turn(session_id: str, turn_id: str) -> None:
        """Remove the records of a turn whose ``turn-finish`` is committed, but those whose
        keeper still runs (never earlier: until a step's end is committed, a bridge death runs
        the step again, which takes its record's result)."""
        from . import STATE_DIR

        if not STATE_DIR:
            return
        folder = os.path.join(STATE_DIR, "commands", _turn_key(session_id, turn_id))
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            if _lock_free(os.path.join(folder, name)):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        with contextlib.suppress(OSError):  # a keeper may still run in it
            os.rmdir(folder)


def _turn_key(session_id: str, turn_id: str) -> str:
    """The name of a turn's folder of records (below ``commands/``)."""
    key = "\0".join((session_id, turn_id)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(key).hexdigest()[:32]


def _lock_free(folder: str) -> bool:
    """Whether nobody holds the record's lock (its keeper is gone, or never started)."""
    try:
        fd = os.open(os.path.join(folder, "lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
