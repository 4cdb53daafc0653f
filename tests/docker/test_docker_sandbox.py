"""DockerSandbox against a real Docker engine (issue 8): the Sandbox protocol through the
Docker API, the exec tunnel of a container with no network, the template that installs the
bridge from host-built wheels, and whole sessions: a shell turn, two hosts on one bridge, the
bridge SIGKILLed mid-turn (C13), the container removed mid-turn (C15), and a second session
after the host process restarted (C04, the bridge found through its listening file)."""
from __future__ import annotations

import json
import os
import posixpath
import socket
import subprocess
import sys
import threading

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.sandbox.base import SpawnedProcess
from bridge_client.sandbox.docker import LABEL, DockerSandbox
from docker_support import BASE_IMAGE, NOPYTHON_IMAGE, TEST_LABEL, remove_container
from host_support import SECRET, wait_until

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))


def _options(driver: str = "shell", **kw):
    kw.setdefault("bridge_idle_timeout", 60.0)
    return bc.bridge_options(driver, python="python3", secret=SECRET, **kw)


def _session_options(sandbox, **kw):
    kw.setdefault("launch_timeout", 30.0)
    kw.setdefault("resend_window", 15.0)
    kw.setdefault("ping_interval", 1.0)
    kw.setdefault("ping_timeout", 3.0)
    return bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), **kw)


def _other_host(container_id: str, driver: str, agent_options, prompt: str, home: str) -> dict:
    """Run one turn from another host process; return what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_CLIENT_")}
    env.update(BRIDGE_CLIENT_HOME=home, BRIDGE_CLIENT_SECRET=SECRET)
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "host_process.py"), container_id, driver,
         json.dumps(agent_options), prompt],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=90,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


# -- the Sandbox protocol ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain(request, docker_client, test_images):
    """A container of the base image with nothing installed, shared by the protocol tests."""
    sandbox = DockerSandbox.create(
        BASE_IMAGE, network_mode="none", labels={TEST_LABEL: f"{request.module.__name__}:plain"}
    )
    yield sandbox
    sandbox.close()
    remove_container(docker_client, sandbox.id)


def test_protocol_exec_files_spawn_in_a_container_without_network(plain, docker_client):
    sandbox = plain
    assert isinstance(sandbox, bc.Sandbox)
    info = docker_client.api.inspect_container(sandbox.id)
    assert sandbox.id == info["Id"], "the sandbox id is the container id"
    assert info["Config"]["Labels"][LABEL] == "1" and TEST_LABEL in info["Config"]["Labels"]
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert sandbox.workdir == "/workspace"

    done = sandbox.exec(["sh", "-c", 'pwd; echo "$GREETING"; echo oops >&2; exit 3'], env={"GREETING": "hi"})
    assert (done.exit_code, done.stdout, done.stderr) == (3, b"/workspace\nhi\n", b"oops\n")
    assert sandbox.exec(["pwd"], cwd="/tmp").stdout == b"/tmp\n"
    # Output that arrives with the upgrade response is not lost (docker-py issue 3332).
    echoed = [sandbox.exec(["echo", str(i)]).stdout for i in range(20)]
    assert echoed == [f"{i}\n".encode() for i in range(20)]
    # Only the loopback interface: no network at all.
    ifaces = sandbox.exec(["cat", "/proc/net/dev"]).stdout.decode()
    assert [line.split(":")[0].strip() for line in ifaces.splitlines()[2:]] == ["lo"]
    with pytest.raises(FileNotFoundError):
        sandbox.exec(["no-such-program"])
    with pytest.raises(TimeoutError):
        sandbox.exec(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    cmdlines = ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]
    assert wait_until(lambda: b"sleep 30" not in sandbox.exec(cmdlines).stdout, timeout=10), \
        "the timed-out command was killed, and what it started"

    data = bytes(range(256)) * 1000
    path = posixpath.join(sandbox.state_root, "a", "b", "file.bin")
    sandbox.write_file(path, data, mode=0o640)
    assert sandbox.read_file(path) == data
    folder_a = posixpath.join(sandbox.state_root, "a")
    modes = sandbox.exec(["stat", "-c", "%a %u", path, posixpath.dirname(path), folder_a])
    assert modes.stdout.decode().split("\n")[:3] == ["640 0", "700 0", "700 0"]
    sandbox.write_file(path, b"second", mode=0o600)
    assert sandbox.read_file(path) == b"second"
    listing = sandbox.exec(["ls", "-A", posixpath.dirname(path)]).stdout
    assert listing == b"file.bin\n", "no temporary file left"
    sandbox.exec(["ln", "-s", "b/file.bin", posixpath.join(sandbox.state_root, "a", "link")])
    assert sandbox.read_file(posixpath.join(sandbox.state_root, "a", "link")) == b"second"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/no/such/file")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file("/etc")

    log = posixpath.join(sandbox.state_root, "logs", "spawned.log")
    script = 'echo "started $MARK"; sleep 0.3; echo done; exit 7'
    proc = sandbox.spawn(["sh", "-c", script], env={"MARK": "m1"}, log_path=log)
    assert isinstance(proc, SpawnedProcess)
    assert wait_until(lambda: proc.poll() is not None, timeout=15)
    assert proc.poll() == 7
    assert sandbox.read_file(log) == b"started m1\ndone\n"
    assert sandbox.exec(["stat", "-c", "%a", log]).stdout == b"600\n"
    missing = sandbox.spawn(["no-such-program"], log_path=log)
    assert wait_until(lambda: missing.poll() is not None, timeout=15)
    assert missing.poll() == 127 and b"no-such-program: not found" in sandbox.read_file(log)


def test_expose_tunnels_into_a_container_without_network_and_closes_with_the_sandbox(plain):
    sandbox = DockerSandbox.attach(plain.id)  # its own tunnels, closed below
    server = (
        "import socket\n"
        "s = socket.create_server(('127.0.0.1', 7001))\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    data = b''\n"
        "    while not data.endswith(b'\\n'):\n"
        "        chunk = c.recv(65536)\n"
        "        if not chunk:\n"
        "            break\n"
        "        data += chunk\n"
        "    c.sendall(data.upper())\n"
        "    c.close()\n"
    )
    sandbox.spawn(["python3", "-c", server], log_path="/tmp/server.log")
    assert sandbox.spawn(["true"]).pid is None, "no pid inside the container is known for a detached exec"
    endpoint = sandbox.expose(7001)
    assert endpoint.url.startswith("ws://127.0.0.1:")
    assert sandbox.expose(7001) == endpoint, "one tunnel per port"
    host_port = int(endpoint.url.rsplit(":", 1)[1].strip("/"))

    def ask(payload: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", host_port), timeout=10) as c:
            c.sendall(payload)
            answer = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    return answer
                answer += chunk

    assert wait_until(lambda: ask(b"ping\n") == b"PING\n", timeout=15)
    big = b"x" * 300_000 + b"\n"
    assert ask(big) == big.upper(), "large payloads cross the multiplexed exec stream intact"
    # Nothing listens on another port in there: the tunnel's connection is closed at once.
    assert ask_closed(sandbox.expose(7002))
    sandbox.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", host_port), timeout=5).close()
    with pytest.raises(bc.SandboxGone):
        sandbox.expose(7001)


def ask_closed(endpoint: bc.Endpoint) -> bool:
    port = int(endpoint.url.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.settimeout(10)
        return c.recv(10) == b""


def test_stopped_or_removed_container_is_sandbox_gone(make_container, docker_client):
    sandbox = make_container(NOPYTHON_IMAGE)  # the smaller image: quicker to create
    docker_client.api.stop(sandbox.id, timeout=1)
    with pytest.raises(bc.SandboxGone):
        sandbox.exec(["true"])
    with pytest.raises(bc.SandboxGone):
        sandbox.expose(8000)
    other = DockerSandbox.attach(sandbox.id)
    sandbox.remove()
    with pytest.raises(bc.SandboxGone):
        other.read_file("/etc/hostname")
    with pytest.raises(bc.SandboxGone):
        other.write_file("/tmp/x", b"x")
    with pytest.raises(bc.SandboxGone):
        other.spawn(["true"])
    other.close()
    with pytest.raises(bc.SandboxGone):
        DockerSandbox.attach(sandbox.id)


def test_template_without_python_is_a_clear_template_error(make_container):
    sandbox = make_container(NOPYTHON_IMAGE)
    with pytest.raises(bc.TemplateError) as caught:
        bc.bridge_template("python3").run(sandbox)
    assert "no Python" in str(caught.value) and "python3" in str(caught.value)


def test_template_installed_the_package_offline(prepared):
    code = "import bridge_client, websockets; print(bridge_client.__version__)"
    done = prepared.exec(["python3", "-c", code])
    assert done.stdout.decode().strip() == bc.__version__
    # The template's check now passes, so running it again installs nothing.
    bc.bridge_template("python3").run(prepared)


# -- sessions ------------------------------------------------------------------------------------


def test_shell_turn_in_a_container_with_no_network(prepared, home):
    opts = _options("shell", agent_options={"timeout": 30})
    with bc.create_session(opts, _session_options(prepared)) as session:
        assert _forwarders(prepared) == 0
        turn = session.turn("echo hello from $(hostname)\necho data > made-here.txt")
        parts = list(turn)
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop"
        hostname = prepared.read_file("/etc/hostname").decode().strip()
        assert f"hello from {hostname}" in turn.text()
        assert prepared.read_file("/workspace/made-here.txt") == b"data\n", \
            "the command ran in the container's workspace"
        state_dir = identity.state_dir(prepared.state_root, session.bridge_id)
        listening = identity.parse_listening(
            prepared.read_file(posixpath.join(state_dir, identity.LISTENING_FILE))
        )
        assert session._hello.pid == listening.pid
        assert _forwarders(prepared) == 1, "one forwarder for the session's one connection"
    # The session's connection is closed: its forwarder in the container ends with it.
    assert wait_until(lambda: _forwarders(prepared) == 0, timeout=15)


def _forwarders(sandbox) -> int:
    cmdlines = sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo"]).stdout
    return cmdlines.count(b"socket.create_connection")


def test_two_hosts_share_the_containers_bridge(prepared, home):
    agent_options = {"timeout": 31}
    opts = _options("shell", agent_options=agent_options)
    with bc.create_session(opts, _session_options(prepared)) as session:
        assert list(session.turn("echo first"))[-1].type == "turn-finish"
        pid, instance = session._hello.pid, session._hello.instance
        other = _other_host(prepared.id, "shell", agent_options, "echo second host", home)
        assert other["finish"] == "turn-finish" and other["text"] == "second host\n"
        assert (other["pid"], other["instance"], other["bridge_id"]) == (pid, instance, session.bridge_id)
        assert list(session.turn("echo first again"))[-1].type == "turn-finish"
        assert session._hello.instance == instance


def test_c05_two_hosts_launching_at_once_in_a_new_container_both_install_and_share_one_bridge(
    make_container, home
):
    container = make_container()
    agent_options = {"timeout": 33}
    results = {}

    def host(name: str, sandbox) -> None:
        opts = _options("shell", agent_options=agent_options)
        with bc.create_session(opts, _session_options(sandbox)) as session:
            turn = session.turn(f"echo {name}")
            finish = list(turn)[-1].type
            results[name] = (finish, turn.text(), session._hello.instance)

    # Two hosts: each its own DockerSandbox (own engine client, own tunnels) on the container,
    # both running the template at once (the installs take turns under a lock in there).
    sandboxes = [DockerSandbox.attach(container.id) for _ in range(2)]
    try:
        threads = [threading.Thread(target=host, args=(f"host{i}", sb)) for i, sb in enumerate(sandboxes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
    finally:
        for sb in sandboxes:
            sb.close()
    assert sorted(results) == ["host0", "host1"]
    assert results["host0"][:2] == ("turn-finish", "host0\n")
    assert results["host1"][:2] == ("turn-finish", "host1\n")
    assert results["host0"][2] == results["host1"][2], "one bridge won the lock; both hosts use it"


def test_c13_bridge_sigkilled_in_the_container_mid_turn_the_turn_continues(prepared, home):
    opts = _options("echo", agent_options={"steps": 6, "delay": 0.05})
    with bc.create_session(opts, _session_options(prepared)) as session:
        turn = session.turn("one two three ")
        parts = []
        first_pid = None
        for part in turn:
            parts.append(part)
            if len(parts) == 10:
                first_pid = session._hello.pid
                killed = prepared.exec(["kill", "-KILL", str(first_pid)])
                assert killed.ok, killed.stderr
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop"
        assert session._hello.pid != first_pid, "a new bridge finished the turn"
        indexes = [p.index for p in parts]
        assert indexes == sorted(set(indexes)), "no part repeated, none out of order"
        assert turn.text() == "one two three " * 6


def test_c15_container_removed_mid_turn_gives_bridge_unavailable_with_the_last_state(make_container, home):
    sandbox = make_container()
    opts = _options("echo", agent_options={"steps": 40, "delay": 0.05})
    session = bc.create_session(opts, _session_options(sandbox, resend_window=5.0))
    turn = session.turn("x")
    next(turn)
    last_state = session.state
    assert last_state is not None
    sandbox.remove()
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for _ in turn:
            pass
    assert caught.value.state == last_state
    assert session.released
    assert session.release() == last_state


def test_c04_second_session_after_the_host_restarted_finds_the_bridge_by_its_listening_file(prepared, home):
    agent_options = {"timeout": 32}
    first = _other_host(prepared.id, "shell", agent_options, "echo from the first host process", home)
    assert first["text"] == "from the first host process\n"
    # That host process has exited; its bridge runs on in the container (a detached exec).
    opts = _options("shell", agent_options=agent_options)
    with bc.create_session(opts, _session_options(prepared)) as session:
        assert session.bridge_id == first["bridge_id"]
        assert list(session.turn("echo again"))[-1].type == "turn-finish"
        assert (session._hello.pid, session._hello.instance) == (first["pid"], first["instance"]), \
            "the same bridge answered: found through its listening file, not launched again"


def test_a_container_running_as_another_user_gets_its_files_and_its_install(make_container, home):
    sandbox = make_container(user="1000:1000", environment={"HOME": "/tmp"}, workdir="/tmp/ws")
    assert sandbox.state_root == "/tmp/bridge-client-1000"
    with bc.create_session(_options("shell"), _session_options(sandbox)) as session:
        turn = session.turn("id -u")
        assert list(turn)[-1].type == "turn-finish"
        assert turn.text() == "1000\n"
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        token_file = posixpath.join(state_dir, identity.TOKEN_FILE)
        owners = sandbox.exec(["stat", "-c", "%u %a", token_file, state_dir])
        assert owners.stdout.decode().split("\n")[:2] == ["1000 600", "1000 700"]
    installed = sandbox.exec(["python3", "-c", "import bridge_client; print(bridge_client.__file__)"])
    assert installed.stdout.startswith(b"/tmp/.local/"), "installed in the user's site"
