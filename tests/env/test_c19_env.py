"""C19: a session's environment reaches the driver and its processes on every connection, is
never stored, logged or put in argv, and is not part of the bridge id. Real bridges of this
package in a LocalSandbox; the shell driver's commands, a CLI driver's subprocess and the
openai driver's key lookup are what see it."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from env_support import bridge_pid, files_holding, proc_file, sigkill_bridge, state_dir
from host_support import SECRET, options, session_options

pytestmark = pytest.mark.timeout(60)

SECRET_VALUE = "sk-c19-" + "7f3a9e" * 4  # what must never show on disk or in argv


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# A command that proves it saw the secret without printing it (its output is stored).
SHOW_SECRET_HASH = 'printf %s "$API_TOKEN" | sha256sum | cut -c1-64'


def test_c19_env_reaches_shell_commands(sandbox):
    env = {"FOO": "from-the-session", "API_TOKEN": bc.Redacted(SECRET_VALUE), "EMPTY": ""}
    with bc.create_session(options("shell"), session_options(sandbox, env=env)) as session:
        turn = session.turn('echo "foo=$FOO empty=[${EMPTY-unset}]"\n' + SHOW_SECRET_HASH)
        parts = list(turn)
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert turn.text().splitlines() == ["foo=from-the-session empty=[]", _sha(SECRET_VALUE)]


def test_c19_secret_is_not_in_store_log_launch_file_or_argv(sandbox):
    env = {"API_TOKEN": bc.Redacted(SECRET_VALUE)}
    with bc.create_session(options("shell"), session_options(sandbox, env=env)) as session:
        turn = session.turn(SHOW_SECRET_HASH + "\nsleep 0.2")
        assert turn.text() == ""  # nothing read yet
        list(turn)
        assert turn.text().strip() == _sha(SECRET_VALUE), "the command saw the secret"
        pid = bridge_pid(sandbox, session.bridge_id)
        assert pid is not None
        secret = SECRET_VALUE.encode()
        assert secret not in proc_file(pid, "cmdline"), "the secret is in the bridge's argv"
        assert secret not in proc_file(pid, "environ"), "the bridge's own environment holds the secret"
        folder = state_dir(sandbox, session.bridge_id)
        for name in (identity.LAUNCH_FILE, identity.STORE_FILE, "bridge.log"):
            assert os.path.exists(os.path.join(folder, name)), name
        assert files_holding(folder, secret) == [], "a file of the bridge holds the secret"
        state = session.release()
    assert SECRET_VALUE not in json.dumps(state.to_dict()), "the secret is in the session state"
    assert files_holding(state_dir(sandbox, session.bridge_id), secret) == []
    assert SECRET_VALUE not in repr(session_options(sandbox, env=env))


def test_c19_bridge_id_unchanged_by_env_and_each_session_sees_its_own(sandbox):
    opts = options("shell")
    a = bc.create_session(opts, session_options(sandbox, env={"WHO": "alpha"}))
    b = bc.create_session(opts, session_options(sandbox, env={"WHO": "beta", "ONLY_B": "yes"}))
    plain = bc.create_session(opts, session_options(sandbox))
    try:
        assert a.bridge_id == b.bridge_id == plain.bridge_id, "env is not part of the bridge id"
        # The two turns run at the same time in one bridge; each sees its own session's env.
        prompt = 'sleep 0.5; echo "$WHO ${ONLY_B:-no}"'
        turns = [a.turn(prompt), b.turn(prompt)]
        results = {}
        threads = [threading.Thread(target=lambda t=t: results.update({t.id: list(t)})) for t in turns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert a.instance == b.instance, "one bridge serves both sessions"
        assert [t.text().strip() for t in turns] == ["alpha no", "beta yes"]
        third = plain.turn('echo "[${WHO-unset}]"')
        list(third)
        assert third.text().strip() == "[unset]", "a session without env sees none of the others'"
        assert plain.instance == a.instance
    finally:
        for s in (a, b, plain):
            s.release()


def test_c19_env_comes_back_after_a_bridge_restart(sandbox):
    opts = options("shell")
    with bc.create_session(opts, session_options(sandbox, env={"FOO": "kept"})) as session:
        first = session.turn('echo "$FOO"')
        list(first)
        old = sigkill_bridge(sandbox, session.bridge_id)
        second = session.turn('echo "again $FOO"')  # a new connection launches a new bridge
        list(second)
        assert bridge_pid(sandbox, session.bridge_id) not in (None, old)
    assert first.text().strip() == "kept"
    assert second.text().strip() == "again kept", "the new bridge got the env with OpenSession"


def test_c19_turn_continued_after_sigkill_sees_the_env(sandbox, workspace):
    """B05 with env: the step cut by the kill runs again in the new bridge, with the env the
    reconnecting session sent."""
    gate = os.path.join(workspace, "gate")
    prompt = f'echo "one $FOO"\nwhile [ ! -e {gate} ]; do sleep 0.05; done; echo "two $FOO"'
    opts = options("shell")
    with bc.create_session(opts, session_options(sandbox, env={"FOO": "bar"})) as session:
        turn = session.turn(prompt)
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and part.type == "tool-call" and part.step == 1:
                killed = sigkill_bridge(sandbox, session.bridge_id)
                open(gate, "w").close()  # the step runs again in the new bridge and ends
    assert killed is not None
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert any(p.type == "step-reset" and p.step == 1 for p in parts), "step 1 was run again"
    text = turn.text()
    assert "one bar" in text and text.rstrip().endswith("two bar"), text


def test_c19_env_reaches_a_cli_drivers_subprocess(sandbox, workspace):
    """The claude-code driver's CLI (a stand-in program printing stream-json) sees the env."""
    fake = os.path.join(workspace, "fake-claude")
    with open(fake, "w") as f:
        f.write(
            textwrap.dedent(
                f"""\
                #!{sys.executable}
                import json, os, sys
                sys.stdin.readline()
                def say(obj):
                    print(json.dumps(obj), flush=True)
                say({{"type": "system", "subtype": "init", "session_id": "cli-1"}})
                text = "FOO=" + os.environ.get("FOO", "unset")
                block = {{"type": "text", "text": text}}
                say({{"type": "assistant", "message": {{"id": "m1", "content": [block]}}}})
                say({{"type": "result", "subtype": "success", "is_error": False, "session_id": "cli-1"}})
                """
            )
        )
    os.chmod(fake, 0o755)
    opts = options("claude-code", agent_options={"executable": fake})
    with bc.create_session(opts, session_options(sandbox, env={"FOO": "for-the-cli"})) as session:
        turn = session.turn("hi")
        parts = list(turn)
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert turn.text() == "FOO=for-the-cli"


# ----------------------------------------------------------------------------- openai


class _ChatServer:
    """A Chat Completions endpoint on 127.0.0.1 answering one streamed text; records the
    Authorization header of each request."""

    def __init__(self) -> None:
        import http.server

        seen = self.authorizations = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                seen.append(self.headers.get("Authorization"))
                chunk = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
                }
                body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = _ChatServer()
    yield server
    server.close()


def _openai(base_url: str, **kw):
    agent_options = {"model": "m", "base_url": base_url, "max_retries": 5, "backoff_initial": 1.0}
    agent_options.update(kw)
    return options("openai", agent_options=agent_options)


def test_c19_openai_key_from_the_session_env(sandbox, chat_server, monkeypatch):
    monkeypatch.delenv("C19_MODEL_KEY", raising=False)
    opts = _openai(chat_server.url, api_key_env="C19_MODEL_KEY")
    env = {"C19_MODEL_KEY": bc.Redacted("sk-from-session")}
    with bc.create_session(opts, session_options(sandbox, env=env)) as session:
        turn = session.turn("hello")
        parts = list(turn)
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert turn.text() == "ok"
    assert chat_server.authorizations == ["Bearer sk-from-session"]


def test_c19_openai_missing_key_fails_at_once_naming_the_variable(sandbox, chat_server, monkeypatch):
    monkeypatch.delenv("C19_MODEL_KEY", raising=False)
    opts = _openai(chat_server.url, api_key_env="C19_MODEL_KEY")
    with bc.create_session(opts, session_options(sandbox)) as session:
        list(session.turn("warm up the bridge"))  # the bridge runs; time only the next turn
        started = time.monotonic()
        parts = list(session.turn("hello"))
        took = time.monotonic() - started
    finish = parts[-1]
    assert finish.finish_reason == "error"
    assert "C19_MODEL_KEY is not set" in finish.error, finish.error
    assert not [p for p in parts if p.type == "data" and p.name == "openai-retry"], "no retries"
    assert chat_server.authorizations == [], "no request went out without the key"
    assert took < 10, f"took {took:.1f} s"


def test_c19_openai_unresolvable_host_is_not_retried(sandbox):
    opts = _openai("http://no-such-host.invalid/v1")  # no api_key_env: a local server, no key needed
    with bc.create_session(opts, session_options(sandbox)) as session:
        parts = list(session.turn("hello"))
    finish = parts[-1]
    assert finish.finish_reason == "error"
    assert "no-such-host.invalid" in finish.error and "does not resolve" in finish.error, finish.error
    assert not [p for p in parts if p.type == "data" and p.name == "openai-retry"], "no retries"


# ----------------------------------------------------------------------------- the CLI


def _cli(args, cwd, env, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bridge_client", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_c19_cli_env_reaches_a_running_bridge(workspace, home):
    base = {k: v for k, v in os.environ.items() if not k.startswith("FOO")}
    base.update(BRIDGE_CLIENT_HOME=home, BRIDGE_CLIENT_SECRET=SECRET)
    first = _cli(
        ["run", "--sandbox", workspace, "--env", "FOO", 'echo "[$FOO]"'], workspace, {**base, "FOO": "x"}
    )
    assert first.returncode == 0, first.stderr
    # The bridge runs on; a new value of FOO and a NAME=VALUE pair reach it all the same.
    second = _cli(
        ["run", "--sandbox", workspace, "--env", "FOO", "--env", "BAR=b=c", 'echo "[$FOO] [$BAR]"'],
        workspace,
        {**base, "FOO": "y"},
    )
    assert second.returncode == 0, second.stderr
    plain = _cli(["run", "--sandbox", workspace, 'echo "[${FOO-unset}]"'], workspace, {**base, "FOO": "z"})
    assert "[x]" in first.stdout, first.stdout
    assert "[y] [b=c]" in second.stdout, second.stdout
    # Without --env a command sees the bridge's own environment: the first run launched it.
    assert "[x]" in plain.stdout, plain.stdout
    listing = _cli(["bridges", "--sandbox", workspace, "--json"], workspace, base)
    rows = [json.loads(line) for line in listing.stdout.splitlines() if line.strip()]
    assert len(rows) == 1, f"one bridge served every run: {rows}"
    missing = _cli(["run", "--sandbox", workspace, "--env", "C19_NOT_SET", "true"], workspace, base)
    assert missing.returncode == 2 and "C19_NOT_SET is not set" in missing.stderr, missing.stderr
    bad = _cli(["run", "--sandbox", workspace, "--env", "BRIDGE_CLIENT_X=1", "true"], workspace, base)
    assert bad.returncode == 2 and "reserved" in bad.stderr, bad.stderr


def test_c19_bad_env_is_refused_at_once():
    with pytest.raises(ValueError, match="reserved"):
        bc.CreateSessionOptions(env={"BRIDGE_CLIENT_SECRET": "x"})
    with pytest.raises(ValueError, match="'1X' is not a variable name"):
        bc.CreateSessionOptions(env={"1X": "x"})
    with pytest.raises(TypeError, match="value of N"):
        bc.CreateSessionOptions(env={"N": 3})
    with pytest.raises(TypeError, match="mapping"):
        bc.CreateSessionOptions(env=["N=3"])
    with pytest.raises(ValueError, match="value of N"):
        bc.CreateSessionOptions(env={"N": "a\x00b"})


def test_c19_continue_command_names_the_variables_never_their_values():
    import argparse

    from bridge_client.cli.stream import continue_command

    args = argparse.Namespace(sandbox="/w", agent="shell", option=[], env=["FOO", f"TOKEN={SECRET_VALUE}"])
    line = continue_command("/t.json", args, 0)
    assert "--env FOO --env TOKEN" in line and SECRET_VALUE not in line, line


def test_c19_c14_turn_continued_in_its_relaunched_bridge_sees_the_env(sandbox, workspace):
    """A turn continued by a session of other options runs in the bridge that started it; when
    that bridge was killed, it is launched again, and the step run again there sees the
    session's environment (the continuing session gives it, the store never had it)."""
    gate = os.path.join(workspace, "gate")
    prompt = f'echo "one $FOO"\nwhile [ ! -e {gate} ]; do sleep 0.05; done; echo "two $FOO"'
    first = bc.create_session(options("shell"), session_options(sandbox, env={"FOO": "bar"}))
    turn = first.turn(prompt)
    for part in turn:
        if part.type == "tool-call" and part.step == 1:
            break
    state = bc.TurnState.from_json(turn.state.to_json())
    first.release()
    sigkill_bridge(sandbox, first.bridge_id)
    other_opts = options("shell", agent_options={"timeout": 30})
    with bc.create_session(other_opts, session_options(sandbox, env={"FOO": "bar"})) as other:
        assert other.bridge_id != first.bridge_id
        again = other.continue_turn(state, steps=1)
        open(gate, "w").close()
        parts = list(again)
        assert again.state.bridge_id == first.bridge_id, "continued in the turn's own bridge"
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert again.text().rstrip().endswith("two bar"), again.text()
