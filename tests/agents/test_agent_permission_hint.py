"""When the real Claude Code's own permission checks refuse a tool (a LocalSandbox, no
``permission_mode``, approvals off: what ``bridge-client run`` without ``--approve`` gives),
the turn says which setting refused it and that ``--approve ask|all`` hands such requests to
the user, in a ``data`` part the CLI's output shows; with approvals on it says nothing of the
kind (the user was asked)."""
from __future__ import annotations

import io
import os

import pytest

import bridge_client as bc
from bridge_client.cli.output import Printer
from host_support import options, session_options
from model_server import shell_call, text_quoting_last_tool_output

pytestmark = pytest.mark.timeout(120)


def _run(cli, sandbox, **kw):
    opts = options(cli.driver, agent_options=cli.agent_options)
    with bc.create_session(opts, session_options(sandbox, launch_timeout=60.0, **kw)) as session:
        turn = session.turn("Write f.txt")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                turn.approve(part)
    return parts


def test_claude_code_refused_tool_names_the_setting_and_the_approve_flag(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    del cli.agent_options["permission_mode"]  # the default: no bypass on a LocalSandbox
    model.script(shell_call("echo hi > f.txt"), text_quoting_last_tool_output())
    parts = _run(cli, sandbox)
    assert not os.path.exists(os.path.join(workspace, "f.txt")), "claude's own check refused the command"
    hints = [p for p in parts if p.type == "data" and p.name == "claude-code-permission-refused"]
    assert len(hints) == 1, [(p.type, getattr(p, "name", None)) for p in parts]
    call = next(p for p in parts if isinstance(p, bc.ToolCall))
    assert hints[0].data["toolCallId"] == call.tool_call_id and hints[0].data["tool"] == "Bash"
    message = hints[0].data["message"]
    assert "no permission_mode" in message and "--approve ask" in message and "--approve all" in message
    out = io.StringIO()
    printer = Printer(out)
    for part in parts:
        printer.show(part)
    assert "--approve ask" in out.getvalue(), "the CLI shows the hint"


def test_claude_code_with_approvals_gets_no_refusal_hint(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    del cli.agent_options["permission_mode"]
    model.script(shell_call("echo hi > f.txt"), text_quoting_last_tool_output())
    parts = _run(cli, sandbox, approvals=True)
    assert os.path.exists(os.path.join(workspace, "f.txt")), "the user approved the command"
    assert not [p for p in parts if p.type == "data" and p.name.endswith("-permission-refused")]
