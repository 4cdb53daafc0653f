"""The Gemini CLI's host tools settings file (drivers/gemini_host.py): the CLI reads a system
settings file only when it and every folder above it are root's and writable by neither
group nor others, so the file goes into such a folder, never below /tmp; a settings file the
session already names is merged in; the folder is gone when the run ends."""
from __future__ import annotations

import json
import os
import stat

import pytest

from bridge_client.drivers import gemini_host, mcp_config


class _Relay:
    path, token = "/nowhere/relay.sock", "t0ken"


def test_c22_a_folder_below_tmp_is_not_secure_for_the_gemini_cli(tmp_path):
    folder = tmp_path / "settings"
    folder.mkdir(mode=0o700)
    assert os.stat("/tmp").st_mode & stat.S_IWOTH, "the premise: /tmp is writable by all"
    assert not gemini_host._secure(str(folder)), "an ancestor (/tmp) is writable by others"


@pytest.mark.skipif(os.geteuid() != 0, reason="the Gemini CLI reads a system settings file only as root's")
def test_c22_gemini_settings_file_names_the_host_server_in_a_secure_folder(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps({"mcpServers": {"mine": {"command": "true"}}, "ui": {"theme": "x"}}))
    monkeypatch.setenv(gemini_host.VARIABLE, str(theirs))
    monkeypatch.setattr(mcp_config, "current", lambda: _Relay())
    assert gemini_host.available()
    with gemini_host.host_settings() as env:
        path = env[gemini_host.VARIABLE]
        assert gemini_host.settings_env() == env
        assert gemini_host._secure(path), "the CLI would read it"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        settings = json.loads(open(path).read())
    assert settings["ui"] == {"theme": "x"} and settings["mcpServers"]["mine"] == {"command": "true"}
    host = settings["mcpServers"]["host"]
    assert host["trust"] is True and host["args"] == ["-m", "bridge_client.drivers.mcp_host"]
    assert host["env"]["BRIDGE_CLIENT_HOST_TOKEN"] == "t0ken"
    assert not os.path.exists(os.path.dirname(path)), "removed when the run ends"
    assert gemini_host.settings_env() == {}


def test_c22_gemini_settings_without_host_tools_add_nothing(monkeypatch):
    monkeypatch.setattr(mcp_config, "current", lambda: None)
    with gemini_host.host_settings() as env:
        assert env == {} and gemini_host.settings_env() == {}


def test_c22_gemini_offers_no_host_tools_to_a_bridge_not_running_as_root(monkeypatch):
    from bridge_client.drivers.gemini import GeminiDriver

    driver = GeminiDriver({"executable": "/nowhere/gemini"})
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert not gemini_host.available()
    assert driver.supports_host_tools is False, "so the session is refused with ToolsUnsupported"


def test_c22_gemini_host_tools_refused_for_a_bridge_not_running_as_root_say_why_and_the_fix(monkeypatch):
    # The bridge's own check of OpenSession's host tools, with the real driver: the refusal
    # says that the CLI wants a root-owned settings folder, the bridge's uid, and what to do.
    from bridge_client.bridge.sessions import _check_tools
    from bridge_client.drivers.gemini import GeminiDriver
    from bridge_client.errors import ToolsUnsupported

    driver = GeminiDriver({"executable": "/nowhere/gemini"})
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    tool = {"name": "lookup", "description": "Look up.", "inputSchema": {"type": "object"}}
    with pytest.raises(ToolsUnsupported) as caught:
        _check_tools(driver, "gemini", "s1", {"host_tools": [tool]})
    text = str(caught.value)
    for words in ("owned by root", "uid 1000", "run the bridge as root", "--experimental-acp"):
        assert words in text, text
