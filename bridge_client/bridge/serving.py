"""The running bridge program: the store, the turn manager and the server it is made of,
the listening file it writes, keeps and removes on the way out, the
signals that stop it, and its shutdown (once, from any thread).

The server side (``server``, ``store``, ``turns``, websockets) is imported only when a
:class:`RunningBridge` is made, once the lock is held.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import ProtocolError
from ..state_dir import identity
from .launch import Launch, LaunchError

__all__ = ["RunningBridge", "SignalWatcher"]

log = logging.getLogger("bridge_client.bridge")  # one logger for all the bridge program's modules

_SHUTDOWN_TIMEOUT = 30.0
_LISTENING_CHECK = 1.0  # seconds between checks that listening.json still names this bridge


class RunningBridge:
    """The running bridge: its parts, and the way it stops (once, from any thread)."""

    def __init__(
        self, launch: Launch, limits: Optional[Dict[str, Any]] = None, lock_fd: Optional[int] = None
    ) -> None:
        # Imported here so that ``load_driver`` and the startup checks work without websockets,
        # and a bridge that loses the lock exits without importing them.
        import sqlite3

        from ..wire.parts import PROTOCOL_VERSION, HelloResult
        from .recovery import open_store
        from .server import BridgeServer, IdleWatcher, default_limits
        from .store import StoreError
        from .turns import TurnManager, iso_now

        self.launch = launch
        self.instance = uuid.uuid4().hex
        # The lock file this bridge holds, as (device, inode): the state directory is still
        # this bridge's while the file at the lock's path is that one (see _keep_listening).
        self._lock_file: Optional[Tuple[int, int]] = None if lock_fd is None else _file_id(os.fstat(lock_fd))
        self._lock_path = os.path.join(launch.state, identity.LOCK_FILE)
        self.started_at = iso_now()
        self.code = 0
        self._stop_lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        info = launch.info
        store_path = os.path.join(launch.state, identity.STORE_FILE)
        limits = dict(limits or {})
        bounds = default_limits()  # from the open-files and task limits
        cancel_grace = limits.pop("cancel_grace", None)
        max_turns = limits.pop("max_turns", None) or bounds.turns
        synchronous = limits.pop("synchronous", None) or "FULL"
        limits.setdefault("max_connections", bounds.connections)
        limits.setdefault("max_streams", bounds.streams)
        try:
            # A damaged store is moved aside and a fresh one (a new generation) started; logged.
            self.store = open_store(store_path, on_fatal=self._store_failed, synchronous=synchronous).store
        except (sqlite3.Error, OSError, StoreError) as exc:  # StoreError: a newer schema
            raise LaunchError(f"cannot open the store {store_path}: {exc}") from None
        log.info("store %s: generation %s, synchronous=%s", store_path, self.store.generation, synchronous)
        self.idle = IdleWatcher(info.idle_timeout, lambda: self.stop("idle"))
        turn_options: Dict[str, Any] = {} if cancel_grace is None else {"cancel_grace": cancel_grace}
        self.manager = TurnManager(
            self.store,
            launch.driver,
            agent_id=info.agent_id,
            bridge_id=info.bridge_id,
            on_running=self.idle.set_running,
            generation=self.store.generation,
            max_running=max_turns,
            **turn_options,
        )
        hello = HelloResult(
            info.agent_id,
            info.bridge_id,
            self.instance,
            PROTOCOL_VERSION,
            os.getpid(),
            self.started_at,
            self.store.generation,
        )
        self.server = BridgeServer(
            self.manager,
            token=launch.token,
            hello=hello.to_dict(),
            bind=info.bind,
            idle=self.idle,
            **limits,  # max_connections, max_handshakes, handshake_timeout, the bounds on work
        )
        self.listening_path = os.path.join(launch.state, identity.LISTENING_FILE)

    def _store_failed(self, exc: BaseException) -> None:
        self.stop(f"the store failed ({type(exc).__name__})", code=1)

    def stop(self, reason: str, code: int = 0) -> None:
        """Shut down cleanly, once: in a thread of its own, because the server's shutdown
        waits for the connection threads and for serve_forever to return."""
        with self._stop_lock:
            if self._stopping:
                return
            self._stopping = True
            self.code = code
        log.info("shutting down: %s", reason)
        threading.Thread(target=self._shutdown, name="bridge-shutdown", daemon=True).start()

    def _shutdown(self) -> None:
        try:
            self.idle.stop()
            # Connections first: their hosts see a drop and resend to the next bridge,
            # rather than getting answers from a bridge that is going away.
            self.server.shutdown()
            self.manager.close()  # running turns write no more; a restart continues them
        except Exception:
            log.exception("shutdown failed")
        finally:
            self._stopped.set()

    def run(self, on_listening: Callable[[], None] = lambda: None) -> int:
        """Listen, announce (the listening file, then ``on_listening()``), serve until
        stopped, clean up. Returns the exit code."""
        from ..wire.parts import PROTOCOL_VERSION

        try:
            port = self.server.start()
        except OSError as exc:
            self.store.close()
            raise LaunchError(f"cannot listen on {self.launch.info.bind}: {exc.strerror or exc}") from None
        signals = SignalWatcher(self.stop)  # before the file: a SIGTERM from now on is clean
        info = self.launch.info
        listening = identity.ListeningInfo(
            PROTOCOL_VERSION,
            info.agent_id,
            info.bridge_id,
            info.bind,
            port,
            os.getpid(),
            self.instance,
            self.started_at,
        )
        try:
            identity.secure_write(self.listening_path, listening.to_json().encode("utf-8"))
        except OSError as exc:
            log.error("cannot write %s: %s", self.listening_path, exc.strerror or exc)
            self.stop("no listening file", code=2)
        else:
            log.info(
                "bridge %s (agent %s, instance %s) listening on %s:%d",
                info.bridge_id,
                info.agent_id,
                self.instance,
                info.bind,
                port,
            )
            self.idle.start()
            on_listening()
        keeper = threading.Thread(
            target=self._keep_listening, args=(listening,), name="bridge-listening", daemon=True
        )
        keeper.start()
        try:
            self.server.serve_forever()
            if not self._stopping:
                # websockets' accept loop ends on an OSError (EMFILE, say): a bridge that no
                # longer accepts must not keep the lock and the listening file.
                log.error("the server stopped accepting connections")
                self.stop("the server stopped accepting connections", code=1)
        except Exception:
            log.exception("the server failed")
            self.stop("the server failed", code=1)
        finally:
            self._stopped.wait(_SHUTDOWN_TIMEOUT)
            keeper.join(timeout=2 * _LISTENING_CHECK)  # it must not write the file again after this
            signals.close()
            self.store.close()
            self._remove_listening()
        log.info("bridge stopped")
        return self.code

    def _keep_listening(self, listening: identity.ListeningInfo) -> None:
        """Rewrite listening.json when it no longer names this instance (removed, damaged):
        hosts find the bridge only through it, and the lock keeps any other bridge from
        writing it. When the state directory itself is gone or replaced (its lock file is no
        longer the one this bridge holds), the bridge stops instead: its store was removed with
        the directory, and a listening file written into a new folder would name a bridge
        whose turns no one can find again (or cover the listening file of the bridge that
        now holds the new folder's lock)."""
        expected = listening.to_json().encode("utf-8")
        while not self._stopped.wait(_LISTENING_CHECK):
            if self._stopping:
                return
            try:
                # Never blocks: a FIFO put in its place is refused, then replaced below.
                if identity.optional_read(self.listening_path) == expected:
                    continue
            except OSError as exc:  # UntrustedFile included
                log.warning("listening file is unusable (%s)", exc)
            if not self._holds_state_dir():
                log.error("the state directory %s was removed or replaced; stopping", self.launch.state)
                self.stop("the state directory was removed", code=1)
                return
            log.warning("listening file was changed or removed; writing it again")
            try:
                identity.secure_write(self.listening_path, expected)
            except OSError as exc:
                log.error("cannot write %s: %s", self.listening_path, exc.strerror or exc)

    def _holds_state_dir(self) -> bool:
        """Whether the lock file at the state directory's lock path is the one this bridge
        holds (True when the bridge was made without its lock's descriptor)."""
        if self._lock_file is None:
            return True
        try:
            return _file_id(os.stat(self._lock_path)) == self._lock_file
        except FileNotFoundError:
            return False
        except OSError:  # a folder we cannot search now: no proof that it is gone
            return True

    def _remove_listening(self) -> None:
        """Remove listening.json, only when it still names this instance."""
        try:
            data = identity.optional_read(self.listening_path)
        except OSError:  # not a regular file of ours (UntrustedFile): not ours to remove
            return
        if data is None:
            return
        try:
            named = identity.parse_listening(data).instance
        except ProtocolError:
            return
        if named == self.instance:
            try:
                os.unlink(self.listening_path)
            except FileNotFoundError:
                pass


def _file_id(st: os.stat_result) -> Tuple[int, int]:
    return (st.st_dev, st.st_ino)


class SignalWatcher:
    """Turns SIGTERM/SIGINT into ``stop(name)`` from a thread of its own.

    The signals only write a byte to a socket (``signal.set_wakeup_fd``); a thread reads it.
    So no lock is ever taken inside a signal handler (it could be held by the interrupted
    main thread). Create it in the main thread.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: Any) -> None:
        self._stop = stop
        self._rsock, self._wsock = socket.socketpair()
        self._wsock.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wsock.fileno(), warn_on_full_buffer=False)
        for sig in self._SIGNALS:
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd carries it
        self._thread = threading.Thread(target=self._run, name="bridge-signals", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = self._rsock.recv(64)
            except OSError:
                return
            if not data:
                return
            for number in data:
                if number in (int(s) for s in self._SIGNALS):
                    self._stop(signal.Signals(number).name)

    def close(self) -> None:
        """Restore the default handlers and stop the thread."""
        signal.set_wakeup_fd(self._old_fd)
        for sig in self._SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        self._wsock.close()
        self._rsock.close()
