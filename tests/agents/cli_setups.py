"""The five stream-json CLIs' offline set-ups against the scripted model server: each writes
its CLI's settings under a private HOME, sets the variables that point the CLI at the server
(through ``env``, e.g. ``monkeypatch.setenv``) and returns the driver's ``agent_options``.
A module of its own so that tests/agents/conftest.py and the conformance suite share it by a
name no other folder's conftest takes."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict

from model_server import ModelServer


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _claude(server: ModelServer, home: str, env: Callable[[str, str], None]) -> Dict[str, Any]:
    env("ANTHROPIC_BASE_URL", server.url)
    env("ANTHROPIC_API_KEY", "test-key")
    env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    env("IS_SANDBOX", "1")  # runs as root here, where bypassPermissions needs it
    return {"permission_mode": "bypassPermissions"}


def _codex(server: ModelServer, home: str, env: Callable[[str, str], None]) -> Dict[str, Any]:
    codex_home = os.path.join(home, ".codex")
    _write(
        os.path.join(codex_home, "config.toml"),
        'model = "fake-model"\nmodel_provider = "fake"\n\n[model_providers.fake]\nname = "fake"\n'
        f'base_url = "{server.url}/v1"\nwire_api = "responses"\nenv_key = "FAKE_KEY"\n',
    )
    env("CODEX_HOME", codex_home)
    env("FAKE_KEY", "test-key")
    return {}


def _gemini(server: ModelServer, home: str, env: Callable[[str, str], None]) -> Dict[str, Any]:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    _write(os.path.join(home, ".gemini", "settings.json"), json.dumps(settings))
    env("GEMINI_API_KEY", "test-key")
    env("GOOGLE_GEMINI_BASE_URL", server.url)
    env("GEMINI_CLI_TRUST_WORKSPACE", "true")
    return {"model": "gemini-2.5-flash", "approval_mode": "yolo"}  # a named model: no routing calls


def _qwen(server: ModelServer, home: str, env: Callable[[str, str], None]) -> Dict[str, Any]:
    settings = {
        # No background memory or skill reviews: they would take the script's replies.
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False,
                   "enableAutoSkill": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    _write(os.path.join(home, ".qwen", "settings.json"), json.dumps(settings))
    env("OPENAI_API_KEY", "test-key")
    env("OPENAI_BASE_URL", f"{server.url}/v1")
    env("OPENAI_MODEL", "test-model")
    return {"approval_mode": "yolo"}


def _pi(server: ModelServer, home: str, env: Callable[[str, str], None]) -> Dict[str, Any]:
    provider = {
        "baseUrl": server.url,
        "api": "anthropic-messages",
        "apiKey": "test-key",
        "models": [{"id": "test-model"}],
    }
    _write(os.path.join(home, ".pi", "agent", "models.json"), json.dumps({"providers": {"test": provider}}))
    env("PI_OFFLINE", "1")  # no start-up network operations
    return {"provider": "test", "model": "test-model"}


SETUPS = {"claude-code": _claude, "codex": _codex, "gemini": _gemini, "qwen": _qwen, "pi": _pi}
