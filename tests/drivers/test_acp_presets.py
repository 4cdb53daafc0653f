"""The named ACP agents' drivers (opencode, copilot, codex-acp) without their CLIs: their
options are checked on the host as in the bridge, with a clear ValueError; each builds its
agent's command line and variables from its options; the session's environment is laid over
the preset's variables. (The real CLIs: tests/agents/test_real_agents_more.py.)"""

from __future__ import annotations

import json

import pytest

import bridge_client as bc
from bridge_client.drivers import codex_acp, copilot, opencode


@pytest.mark.parametrize(
    "driver, bad, message",
    [
        ("opencode", {"base_url": "http://h/v1"}, "opencode option 'model' is required with base_url"),
        ("opencode", {"base_url": "ftp://h"}, "opencode option 'base_url' must be an http"),
        ("copilot", {"provider_type": "gemini"}, "copilot option 'provider_type' must be one of openai"),
        ("copilot", {"api_key_env": "K"}, "unknown copilot option"),
        ("codex-acp", {"sandbox": "none"}, "codex-acp option 'sandbox' must be one of read-only"),
        ("codex-acp", {"permission": None}, "codex-acp option 'permission' must be one of reject"),
        ("codex-acp", {"extra_args": "-c x=1"}, "codex-acp option 'extra_args' must be a list"),
    ],
)
def test_bad_preset_options_are_refused_on_the_host_and_in_the_bridge(driver, bad, message):
    with pytest.raises(ValueError, match=message):
        bc.bridge_options(driver, agent_options=bad, secret="s" * 32)
    make = {"opencode": opencode, "copilot": copilot, "codex-acp": codex_acp}[driver].make_driver
    with pytest.raises(ValueError, match=message):
        make(bad)


def test_opencode_gets_its_provider_in_its_configuration_and_the_key_by_name():
    driver = opencode.make_driver({"executable": "/x/opencode", "base_url": "http://h/v1", "model": "m",
                                   "api_key_env": "MY_KEY"})
    assert driver.argv == ["/x/opencode", "acp"]
    config = json.loads(driver.preset_env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == config["small_model"] == "bridge/m"
    assert config["provider"]["bridge"]["options"] == {"baseURL": "http://h/v1", "apiKey": "{env:MY_KEY}"}
    assert config["permission"]["bash"] == "ask", "it asks before a shell command"
    assert driver.preset_env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert driver.permission == "reject", "outside an isolated sandbox the policy refuses"


def test_copilot_gets_its_provider_variables():
    driver = copilot.make_driver({"executable": "/x/copilot", "base_url": "http://h/v1", "model": "m",
                                  "extra_args": ["--log-level", "none"]})
    assert driver.argv == ["/x/copilot", "--acp", "--no-auto-update", "--log-level", "none"]
    assert driver.preset_env == {
        "COPILOT_AUTO_UPDATE": "false",
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": "http://h/v1",
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_MODEL": "m",
    }


def test_codex_acp_gets_its_provider_as_config_overrides():
    driver = codex_acp.make_driver({"executable": "/x/codex-acp", "base_url": "http://h/v1", "model": "m"})
    overrides = driver.argv[2::2]
    assert driver.argv[1::2] == ["-c"] * len(overrides)
    assert overrides == [
        'approval_policy="untrusted"',
        'sandbox_mode="workspace-write"',
        'model_provider="bridge"',
        'model_providers.bridge.name="bridge"',
        'model_providers.bridge.base_url="http://h/v1"',
        'model_providers.bridge.wire_api="responses"',
        'model_providers.bridge.env_key="OPENAI_API_KEY"',
        'model="m"',
    ]
    assert driver.preset_env == {}
