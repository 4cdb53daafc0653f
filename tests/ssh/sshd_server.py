"""A real OpenSSH server for the tests: started on 127.0.0.1 on a free port with keys made
here, its own sshd_config (``-D -e``), and a login user made here with ``useradd``.

Everything it starts is stopped by pid (the listener, the sshd children, the test user's
processes); the user and its home are removed at the end. Needs root, ``/usr/sbin/sshd``,
``ssh-keygen`` and ``useradd``: :func:`why_not` says what is missing.
"""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

SSHD = "/usr/sbin/sshd"


def why_not() -> Optional[str]:
    """Why no test sshd can be started here (``None`` when it can)."""
    if os.geteuid() != 0:
        return "the SSH tests need root (to start sshd and create a login user)"
    for tool in (SSHD, shutil.which("ssh-keygen"), shutil.which("useradd"), shutil.which("userdel")):
        if not tool or not os.path.exists(tool):
            return "openssh-server (sshd, ssh-keygen) and useradd are needed: apt-get install openssh-server"
    return None


def why_not_after_install() -> Optional[str]:
    """As :func:`why_not`, after installing Debian's OpenSSH server once where it is missing
    and we are root (a fresh machine; .ci/run does not install it). Every test that needs
    sshd asks this: whichever runs first installs it, whatever the workers' order."""
    reason = why_not()
    if reason and os.geteuid() == 0:
        from prerequisites import apt_install

        failed = apt_install(["openssh-server", "openssh-client"])
        reason = why_not() if failed is None else f"{reason} ({failed})"
    return reason


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> List[int]:
    """Every live descendant of ``pid`` (through /proc)."""
    parents: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(name))
    out: List[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _pids_of_uid(uid: int) -> List[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def _kill(pids: List[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class SSHServer:
    """A running test sshd and its login user."""

    folder: str
    port: int = 0
    user: str = ""
    uid: int = -1
    home: str = ""
    key: str = ""
    known_hosts: str = ""
    process: Optional["subprocess.Popen[bytes]"] = None
    made: List[str] = field(default_factory=list)

    host = "127.0.0.1"

    def start(self) -> "SSHServer":
        os.chmod(self.folder, 0o755)  # the login user reads authorized_keys here
        keygen = shutil.which("ssh-keygen") or "ssh-keygen"
        host_key = os.path.join(self.folder, "host_key")
        self.key = os.path.join(self.folder, "user_key")
        for path in (host_key, self.key):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", path], check=True,
                           stdin=subprocess.DEVNULL)
        authorized = os.path.join(self.folder, "authorized_keys")
        shutil.copy(self.key + ".pub", authorized)
        os.chmod(authorized, 0o644)
        self.user = "bcssh" + secrets.token_hex(3)
        base = tempfile.mkdtemp(prefix="bc-ssh-home-")
        os.chmod(base, 0o755)
        self.made.append(base)
        self.home = os.path.join(base, self.user)
        subprocess.run(["useradd", "-m", "-d", self.home, "-s", "/bin/sh", "-p", "*", self.user],
                       check=True, stdin=subprocess.DEVNULL, capture_output=True)
        self.uid = pwd.getpwnam(self.user).pw_uid
        self.port = _free_port()
        with open(host_key + ".pub") as f:
            kind, blob = f.read().split()[:2]
        self.known_hosts = os.path.join(self.folder, "known_hosts")
        with open(self.known_hosts, "w") as f:
            f.write(f"[{self.host}]:{self.port} {kind} {blob}\n")
        config = os.path.join(self.folder, "sshd_config")
        with open(config, "w") as f:
            f.write("\n".join([
                f"Port {self.port}", f"ListenAddress {self.host}", f"HostKey {host_key}",
                f"PidFile {os.path.join(self.folder, 'sshd.pid')}",
                f"AuthorizedKeysFile {authorized}", "StrictModes no", "UsePAM no",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes", f"AllowUsers {self.user}",
                "AllowTcpForwarding local", "Subsystem sftp internal-sftp",
                "MaxStartups 100", "MaxSessions 100", "LogLevel VERBOSE", "",
            ]))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        log = open(os.path.join(self.folder, "sshd.log"), "wb")
        try:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", config], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not answer: {self.log()[-2000:]}")

    def log(self) -> str:
        try:
            with open(os.path.join(self.folder, "sshd.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def options(self, **extra: Any) -> Dict[str, Any]:
        """Keyword arguments for ``SSHSandbox`` that reach this server."""
        return dict(user=self.user, port=self.port, key_filename=self.key, allow_agent=False,
                    known_hosts=self.known_hosts, **extra)

    def url(self, path: str) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}{path}"

    def folder_for(self, name: str) -> str:
        """A fresh folder in the login user's home, owned by that user."""
        path = os.path.join(self.home, name)
        os.makedirs(path)
        os.chown(path, self.uid, self.uid)
        return path

    def connection_pids(self) -> List[int]:
        """The sshd processes serving connections now (the listener's children)."""
        assert self.process is not None
        return [p for p in _children(self.process.pid) if _comm(p) == "sshd"]

    def kill_connections(self) -> List[int]:
        """SIGKILL the sshd children serving connections (the listener stays)."""
        assert self.process is not None
        pids = [p for p in _children(self.process.pid) if _comm(p) == "sshd"]
        _kill(pids)
        return pids

    def user_processes(self) -> List[int]:
        return _pids_of_uid(self.uid)

    def stop(self) -> None:
        if self.process is not None:
            _kill(_children(self.process.pid) + [self.process.pid])
            try:
                self.process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self.uid >= 0:
            for _ in range(20):
                pids = _pids_of_uid(self.uid)
                if not pids:
                    break
                _kill(pids)
                time.sleep(0.05)
            subprocess.run(["userdel", "-r", "-f", self.user], stdin=subprocess.DEVNULL,
                           capture_output=True)
        for path in self.made:
            shutil.rmtree(path, ignore_errors=True)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


class Relay:
    """A TCP relay on 127.0.0.1 to ``port`` that can be cut: :meth:`cut` closes its listener
    and every connection, so the far side stops answering at once (a host gone); after
    :meth:`freeze` it forwards nothing more and new connections hang (a host gone silent)."""

    def __init__(self, port: int) -> None:
        import threading

        self._target = port
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self.frozen = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.frozen:
                with self._lock:
                    self._socks.append(client)  # accepted, never answered
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target), timeout=5.0)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not self.frozen:
                    b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def freeze(self) -> None:
        self.frozen = True

    def cut(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
