"""Which ACP permission requests are for a host tool that runs unasked: each agent names the
call its own way (the real CLIs' forms, as recorded by test_conformance.py's runs)."""
from __future__ import annotations

import pytest

from bridge_client.drivers import acp_host

TOOLS = [{"name": "lookup", "approve": False}, {"name": "wipe", "approve": True}]


@pytest.fixture(autouse=True)
def _tools(monkeypatch):
    monkeypatch.setattr(acp_host, "host_tools", lambda ctx: TOOLS)


@pytest.mark.parametrize("title, raw, announced", [
    ("mcp__host__lookup", None, None),                                   # Claude Code
    ("lookup (host MCP Server)", None, None),                            # Gemini
    ("x", {"server_name": "host", "request": {"message": 'Allow run tool "lookup"?'}}, None),  # codex-acp
    ('host__lookup: {"key":"alpha"}', {"key": "alpha"}, None),           # Cline
    ("lookup", {"key": "alpha"}, "host-lookup"),                         # Copilot
])
def test_c22_each_agents_form_of_a_host_tool_call_is_allowed(title, raw, announced):
    assert acp_host.host_tool_asked(None, title, raw, announced)


@pytest.mark.parametrize("title, raw, announced", [
    ("mcp__host__wipe", None, None),          # marked approve=True: asked as any other tool
    ("host-wipe", None, "host-wipe"),
    ('host__wipe: {}', None, None),
    ("lookup", {"key": "alpha"}, None),       # a bare name: not known to be the host's
    ("lookup", None, "other-lookup"),
    ("mcp__other__lookup", None, None),
    ("bash: rm -rf /", None, "bash"),
    (None, None, None),
])
def test_c22_other_permission_requests_go_to_the_policy(title, raw, announced):
    assert not acp_host.host_tool_asked(None, title, raw, announced)
