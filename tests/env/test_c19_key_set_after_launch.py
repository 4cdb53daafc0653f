"""C19 as a user meets it: the openai driver's missing key,
set in the host's shell after the bridge was launched. A real bridge in a LocalSandbox."""
from __future__ import annotations

import pytest

import bridge_client as bc
from host_support import session_options
from test_c19_env import _openai, chat_server  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(60)


def test_c19_a_key_set_after_the_launch_is_said_to_need_the_session(sandbox, chat_server, monkeypatch):  # noqa: F811
    # The first turn fails (no key); the user exports the key and runs again: the running
    # bridge still has its launch environment, so the error must say why and what to do.
    monkeypatch.delenv("C19_LATE_KEY", raising=False)
    opts = _openai(chat_server.url, api_key_env="C19_LATE_KEY")
    with bc.create_session(opts, session_options(sandbox)) as session:
        first = list(session.turn("hello"))[-1]
    assert first.finish_reason == "error" and "C19_LATE_KEY is not set" in first.error
    monkeypatch.setenv("C19_LATE_KEY", "sk-late")
    with bc.create_session(opts, session_options(sandbox)) as session:
        again = list(session.turn("hello"))[-1]
    assert again.finish_reason == "error", "the running bridge does not see the host's new variable"
    assert "already running" in again.error and "env" in again.error, again.error
    keyed = session_options(sandbox, env={"C19_LATE_KEY": bc.Redacted("sk-late")})
    with bc.create_session(opts, keyed) as session:
        fixed = list(session.turn("hello"))[-1]
    assert fixed.finish_reason == "stop", fixed
    assert chat_server.authorizations == ["Bearer sk-late"]
