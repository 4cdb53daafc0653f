"""A real agent CLI set up wrong: the real
Claude Code CLI through a real bridge, offline, with a base URL where nothing listens."""
from __future__ import annotations

import socket
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options

pytestmark = pytest.mark.timeout(120)


def _refused_url() -> str:
    """``http://127.0.0.1:PORT`` of a port bound but not listening: every connect is refused."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    _refused_url.holder = holder  # type: ignore[attr-defined]  # kept bound for the test
    return f"http://127.0.0.1:{holder.getsockname()[1]}"


def test_claude_code_retrying_a_wrong_base_url_says_so(real_cli, sandbox, monkeypatch):
    # Claude Code retries a failed model request 10 times over minutes, printing only its
    # `system` `api_retry` messages; before, the driver skipped them and the turn was silent
    # until the CLI gave up (a wrong key or base URL looked like a hang).
    cli = real_cli("claude-code")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _refused_url())
    with bc.create_session(
        options(cli.driver, agent_options=cli.agent_options),
        session_options(sandbox, launch_timeout=60.0),
    ) as session:
        turn = session.turn("hello")
        guard = threading.Timer(30.0, turn.cancel)  # without the retry parts: end the wait
        guard.start()
        retries = []
        try:
            for part in turn:
                if isinstance(part, bc.Data) and part.name == "claude-code-retry":
                    retries.append(part.data)
                    turn.cancel()
        finally:
            guard.cancel()
    assert retries, "no claude-code-retry part within 30 s"
    first = retries[0]
    assert first["attempt"] == 1 and first["max_retries"] >= 1, first
    assert set(first) <= {"attempt", "max_retries", "retry_delay_ms", "error_status", "error"}, first


def test_claude_code_without_a_key_says_where_the_key_comes_from(real_cli, model, sandbox, monkeypatch):
    # No key in the bridge's environment: claude answers "Not logged in"; a user who then
    # exports the key in the shell still gets it from the running bridge, so the error says
    # where claude reads it (the session's --env / env=); with the session's key it works.
    from model_server import text

    cli = real_cli("claude-code")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    opts = options(cli.driver, agent_options=cli.agent_options)
    with bc.create_session(opts, session_options(sandbox, launch_timeout=60.0)) as session:
        finish = list(session.turn("hello"))[-1]
    assert finish.finish_reason == "error", finish
    assert "--env ANTHROPIC_API_KEY" in finish.error and "launched" in finish.error, finish.error
    model.script(text("hello back"))
    keyed = session_options(sandbox, launch_timeout=60.0, env={"ANTHROPIC_API_KEY": bc.Redacted("test-key")})
    with bc.create_session(opts, keyed) as session:
        turn = session.turn("hello")
        assert list(turn)[-1].finish_reason == "stop" and "hello back" in turn.text()
