"""An SSH sandbox pointed at a port where no SSH server answers (issue 27, item 3): something
else answers (an HTTP-ish server), the port accepts and says nothing, or it refuses. Each fails
with a typed error that says which, at once (no reconnect loop), and nothing of paramiko's (its
tracebacks, its log lines) reaches standard error: not through the API in a program without its
own logging set-up, not through the ``bridge-client run`` command.

The servers are real listening sockets on 127.0.0.1 in this process; no sshd is needed."""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator, List, Tuple

import pytest

pytest.importorskip("paramiko")

pytestmark = pytest.mark.timeout(120)

HTTP_ANSWER = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

# The old code retried a non-SSH answer for the whole connect window (10 s by default, here
# set to the same 10 s) with a traceback per try; a bound well under that, but generous for a
# loaded machine, tells the two apart.
WINDOW = 10.0
AT_ONCE = 6.0


class _Server:
    """A TCP listener on 127.0.0.1 that answers each connection as ``mode`` says: ``http``
    reads a little and answers HTTP 400, then closes; ``silent`` accepts and says nothing
    until it is stopped. Counts the connections it accepted."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accepted = 0
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self._held: List[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.mode == "http":
                conn.settimeout(2.0)
                try:
                    conn.recv(4096)
                    conn.sendall(HTTP_ANSWER)
                except OSError:
                    pass
                conn.close()
            else:
                self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def http_port() -> Iterator[_Server]:
    server = _Server("http")
    yield server
    server.close()


@pytest.fixture
def silent_port() -> Iterator[_Server]:
    server = _Server("silent")
    yield server
    server.close()


def _closed_port() -> int:
    with socket.socket() as probe:  # free a moment ago: nothing listens there now
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- through the API, in a program without its own logging set-up ---------------------------

_PROGRAM = r"""
import sys, time
import bridge_client as bc
from bridge_client.sandbox.urls import sandbox_from_url
port, timeout, form = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
started = time.monotonic()
try:
    if form == "url":
        sandbox_from_url(f"ssh://nobody@127.0.0.1:{port}/tmp", connect_timeout=timeout)
    else:
        bc.SSHSandbox("127.0.0.1", "/tmp", user="nobody", port=port, connect_timeout=timeout,
                      allow_agent=False)
except bc.SandboxGone as exc:
    print(f"{time.monotonic() - started:.2f}")
    print(exc)
    sys.exit(0)
print("no error")
sys.exit(3)
"""


def _api(port: int, timeout: float = WINDOW, form: str = "class") -> Tuple[float, str, str]:
    """Run the API (``SSHSandbox`` or, ``form="url"``, ``sandbox_from_url``) in a fresh Python
    process with no logging configured: the seconds it took, the message, its stderr."""
    done = subprocess.run([sys.executable, "-c", _PROGRAM, str(port), str(timeout), form],
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, HOME=os.environ.get("HOME", "/tmp")))
    assert done.returncode == 0, (done.stdout, done.stderr)
    took, message = done.stdout.split("\n", 1)
    return float(took), message.strip(), done.stderr


def _quiet(stderr: str) -> None:
    assert "Traceback" not in stderr and "paramiko" not in stderr and "Exception" not in stderr, stderr
    assert stderr.strip() == "", stderr


@pytest.mark.parametrize("form", ["class", "url"])
def test_ssh_a_port_that_answers_http_fails_at_once_quoting_what_answered(http_port, form):
    took, message, stderr = _api(http_port.port, form=form)
    assert f"127.0.0.1:{http_port.port} answers, but not with SSH: got 'HTTP/1.1 400 Bad Request'" in message
    assert "does not answer" not in message
    assert took < AT_ONCE, f"retried for {took:.1f} s"
    assert http_port.accepted == 1, "a non-SSH answer is not tried again"
    _quiet(stderr)


def test_ssh_a_port_that_accepts_and_says_nothing_says_so(silent_port):
    took, message, stderr = _api(silent_port.port, timeout=2.0)
    assert f"127.0.0.1:{silent_port.port} accepts connections but says nothing" in message
    assert "No existing session" not in message and "does not answer" not in message
    assert took < WINDOW
    assert silent_port.accepted == 1
    _quiet(stderr)


def test_ssh_a_refused_port_says_it_is_refused():
    took, message, stderr = _api(_closed_port())
    assert "connection refused" in message
    assert took < AT_ONCE
    _quiet(stderr)


def test_ssh_paramikos_records_go_under_the_package_logger_at_debug(http_port, caplog):
    """With DEBUG on for the package, paramiko's records are there, under the package's
    logger and at DEBUG; at the default level they are dropped before any handler."""
    import bridge_client as bc

    caplog.set_level(logging.DEBUG, logger="bridge_client")
    with pytest.raises(bc.SandboxGone, match="answers, but not with SSH"):
        bc.SSHSandbox("127.0.0.1", "/tmp", user="nobody", port=http_port.port,
                      connect_timeout=WINDOW, allow_agent=False)
    theirs = [r for r in caplog.records if r.name.startswith("bridge_client.sandbox.ssh.paramiko")]
    assert theirs, [r.name for r in caplog.records]
    assert {r.levelno for r in theirs} == {logging.DEBUG}
    assert any("Error reading SSH protocol banner" in r.getMessage() for r in theirs)
    assert not [r for r in caplog.records if r.name.startswith("paramiko")]


# -- through the ``bridge-client run`` command ------------------------------------------------

def _run(port: int, tmp_path) -> Tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, BRIDGE_CLIENT_HOME=str(tmp_path / "bc-home"), BRIDGE_CLIENT_SECRET="s")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bridge_client", "run", "--sandbox",
         f"ssh://nobody@127.0.0.1:{port}/tmp", "echo hi"],
        env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )
    return time.monotonic() - started, done


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode not in (0, None), done
    assert "Traceback" not in done.stderr and "paramiko" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error: "), done.stderr
    return lines[0]


def test_cli_run_on_a_port_that_answers_http_names_what_answered_at_once(http_port, tmp_path):
    took, done = _run(http_port.port, tmp_path)
    line = _one_error_line(done)
    assert "answers, but not with SSH: got 'HTTP/1.1 400 Bad Request'" in line
    assert took < AT_ONCE, f"took {took:.1f} s"
    assert http_port.accepted == 1


def test_cli_run_on_a_silent_port_says_it_says_nothing(silent_port, tmp_path):
    took, done = _run(silent_port.port, tmp_path)  # the default connect timeout: 10 s
    line = _one_error_line(done)
    assert "accepts connections but says nothing" in line and "No existing session" not in line
    assert silent_port.accepted == 1


def test_cli_run_on_a_refused_port_says_it_is_refused(tmp_path):
    took, done = _run(_closed_port(), tmp_path)
    line = _one_error_line(done)
    assert "connection refused" in line
    assert took < AT_ONCE
