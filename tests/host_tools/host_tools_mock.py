"""The ``openai`` driver with a scripted model for the host tool tests: the scenarios below
join those of tests/drivers/openai_mock.py (the same factory: the Nth request of a scenario
gets its Nth reply, counted from the request log, so a bridge launched after a SIGKILL goes
on where the killed one stopped). Launched as ``host_tools_mock:make_driver``."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "drivers"))

import openai_mock  # noqa: E402
from openai_mock import sse, text_stream, tool_stream  # noqa: E402


def _call(name: str, args: str, call_id: str = "call_h1"):
    return {"body": sse(tool_stream((call_id, name, [args])))}


openai_mock.SCENARIOS.update(
    {
        # The model calls the host tool once, then answers.
        "host-lookup": [_call("lookup", '{"key": "alpha"}'), {"body": sse(text_stream("Done."))}],
        # The example of docs/host-tools.md.
        "doc-order": [
            _call("lookup_order", '{"order_id": "A-1001"}'),
            {"body": sse(text_stream("Yes, A-1001 has shipped."))},
        ],
        # A tool that raises; the turn goes on.
        "host-raise": [_call("explode", '{"why": "on purpose"}'), {"body": sse(text_stream("Noted."))}],
    }
)

make_driver = openai_mock.make_driver
