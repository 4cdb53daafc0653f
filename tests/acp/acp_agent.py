"""A small ACP agent of our own, for the ``acp`` driver's tests: JSON-RPC 2.0, one message per
line on stdio, protocol version 1 (``initialize``, ``session/new``, ``session/load`` with a
replay of the history, ``session/prompt``, ``session/cancel``; it calls the client's
``session/request_permission``, ``fs/read_text_file`` and ``fs/write_text_file``).

Usage: ``python acp_agent.py --store DIR [--no-load] [--ask] [--ignore-cancel] [--protocol N]
[--late-replay]`` (``--late-replay``: ``session/load`` answers first and replays the history
after its answer, as the Gemini CLI does).
Sessions live in ``DIR/<id>.json`` (their history, how many prompts they had, the prompt under
way), so a new process loads them. The agent exits when its stdin ends.

A prompt is a small script, one command a line:

- ``say TEXT`` (two message chunks), ``think TEXT`` (a thought chunk), ``plan A; B``;
- ``run CMD``: a tool call (kind ``execute``) announced twice, as real agents do (first without
  its input), a permission request first with ``--ask`` (a rejected call fails; each answer
  is a line of ``DIR/permissions.jsonl``), then
  ``/bin/sh -c CMD`` in the session's folder, its output in the ``completed`` update;
- ``write PATH :: TEXT`` and ``read PATH``: through the client's fs methods (kind ``edit`` /
  ``read``);
- ``wait FILE``: a thought, then waits for FILE to exist (at most 30 s) or a cancel;
- ``hold``: waits for a cancel (at most 30 s; with ``--ignore-cancel`` it never ends early);
- ``env NAME``: says ``NAME=<value or unset>``; ``count``: says ``prompts=N`` for this session;
  ``pid``: says ``pid=<its process id>`` (each with a newline); ``spawn``: starts ``sleep 60``
  in its process group, ignoring SIGTERM and holding none of its pipes, and says
  ``child=<its pid>``;
- ``crash``: exits at once with status 3; ``stop REASON``: ends with that stopReason;
  ``error MSG``: answers the prompt with a JSON-RPC error.

Any other prompt continues the prompt a dead process left unfinished (from the line after the
last one done), or says ``unknown: ...`` when there is none.
"""

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

OUT_LOCK = threading.Lock()
RESPONSES = {}
RESPONSE_READY = threading.Condition()
CANCELLED = set()
WORK = queue.Queue()
NEXT_ID = [0]


def send(message):
    line = json.dumps({"jsonrpc": "2.0", **message})
    with OUT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def call_client(method, params, timeout=30):
    with RESPONSE_READY:
        NEXT_ID[0] += 1
        request_id = f"agent-{NEXT_ID[0]}"
    send({"id": request_id, "method": method, "params": params})
    deadline = time.monotonic() + timeout
    with RESPONSE_READY:
        while request_id not in RESPONSES:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(method)
            RESPONSE_READY.wait(left)
        return RESPONSES.pop(request_id)


def reader():
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "method" not in message:
            with RESPONSE_READY:
                RESPONSES[message.get("id")] = message
                RESPONSE_READY.notify_all()
        elif message["method"] == "session/cancel":
            CANCELLED.add((message.get("params") or {}).get("sessionId"))
        else:
            WORK.put(message)
    WORK.put(None)


class Agent:
    def __init__(self, args):
        self.args = args
        self.client_caps = {}
        self.replay_after = None

    # ---------------------------------------------------------------- sessions on disk

    def path(self, session_id):
        return os.path.join(self.args.store, f"{session_id}.json")

    def load(self, session_id):
        with open(self.path(session_id)) as f:
            return json.load(f)

    def save(self, session_id, data):
        tmp = self.path(session_id) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path(session_id))

    def update(self, session_id, update):
        send({"method": "session/update", "params": {"sessionId": session_id, "update": update}})

    # ---------------------------------------------------------------- methods

    def initialize(self, params):
        self.client_caps = params.get("clientCapabilities") or {}
        return {
            "protocolVersion": self.args.protocol,
            "agentCapabilities": {
                "loadSession": not self.args.no_load,
                **({"mcpCapabilities": {"stdio": False}} if self.args.no_mcp_stdio else {}),
            },
            "authMethods": [],
        }

    def session_new(self, params):
        session_id = f"sess-{uuid.uuid4().hex[:10]}"
        data = {"cwd": params["cwd"], "history": [], "prompts": 0, "pending": None}
        self.save(session_id, {**data, "mcpServers": params.get("mcpServers")})
        return {"sessionId": session_id}

    def session_load(self, params):
        session_id = params["sessionId"]
        if not os.path.exists(self.path(session_id)):
            raise KeyError(f"Session not found: {session_id}")
        if self.args.late_replay:
            self.replay_after = session_id  # after the answer, as the Gemini CLI does
            return None
        self.replay(session_id)
        return None

    def replay(self, session_id):
        data = self.load(session_id)
        for role, text in data["history"]:
            kind = "user_message_chunk" if role == "user" else "agent_message_chunk"
            self.update(session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    def session_prompt(self, params):
        session_id = params["sessionId"]
        data = self.load(session_id)
        text = "".join(b.get("text", "") for b in params["prompt"] if b.get("type") == "text")
        CANCELLED.discard(session_id)
        data["prompts"] += 1
        data["history"].append(["user", text])
        lines = [line for line in text.splitlines() if line.strip()]
        first = 0
        known = (
            "say",
            "think",
            "plan",
            "run",
            "write",
            "read",
            "wait",
            "hold",
            "env",
            "count",
            "crash",
            "stop",
            "error",
            "pid",
            "spawn",
        )
        if not lines or lines[0].split(" ", 1)[0] not in known:
            pending = data.get("pending")
            if pending:
                lines, first = pending["lines"], pending["done"]
            else:
                lines = [f"say unknown: {text}"]
        data["pending"] = {"lines": lines, "done": first}
        self.save(session_id, data)
        ctx = {"id": session_id, "cwd": data["cwd"], "data": data, "said": []}
        for number in range(first, len(lines)):
            if session_id in CANCELLED:
                return self.finish(ctx, "cancelled")
            outcome = self.line(ctx, lines[number])
            data["pending"]["done"] = number + 1
            self.save(session_id, data)
            if outcome is not None:
                return self.finish(ctx, outcome)
        return self.finish(ctx, "cancelled" if session_id in CANCELLED else "end_turn")

    def finish(self, ctx, reason):
        data = ctx["data"]
        data["pending"] = None
        if ctx["said"]:
            data["history"].append(["agent", "".join(ctx["said"])])
        self.save(ctx["id"], data)
        if isinstance(reason, Exception):
            raise reason
        return {"stopReason": reason}

    # ---------------------------------------------------------------- one script line

    def say(self, ctx, text, kind="agent_message_chunk"):
        half = max(1, len(text) // 2)
        for piece in (text[:half], text[half:]):
            if piece:
                self.update(ctx["id"], {"sessionUpdate": kind, "content": {"type": "text", "text": piece}})
        if kind == "agent_message_chunk":
            ctx["said"].append(text)

    def tool(self, ctx, kind, title, raw_input, work):
        call_id = f"call-{uuid.uuid4().hex[:8]}"
        sid = ctx["id"]
        self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": call_id,
                "title": kind.title(),
                "kind": kind,
                "status": "pending",
                "rawInput": {},
            },
        )
        self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": call_id,
                "title": title,
                "kind": kind,
                "status": "pending",
                "rawInput": raw_input,
            },
        )
        if self.args.ask:
            answer = call_client(
                "session/request_permission",
                {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": call_id, "title": title, "rawInput": raw_input},
                    "options": [
                        {"optionId": "yes-always", "name": "Always allow", "kind": "allow_always"},
                        {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                    ],
                },
            )
            outcome = (answer.get("result") or {}).get("outcome") or {}
            with open(os.path.join(self.args.store, "permissions.jsonl"), "a") as f:
                f.write(json.dumps({"toolCallId": call_id, "outcome": outcome}) + "\n")
            if outcome.get("outcome") != "selected" or outcome.get("optionId") == "no":
                self.update(
                    sid,
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call_id,
                        "status": "failed",
                        "content": [
                            {
                                "type": "content",
                                "content": {"type": "text", "text": f"not allowed: {outcome}"},
                            }
                        ],
                    },
                )
                return None
        self.update(
            sid, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
        )
        ok, output = work()
        self.update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": "completed" if ok else "failed",
                "rawOutput": {"output": output},
                "content": [{"type": "content", "content": {"type": "text", "text": output}}],
            },
        )
        return output

    def line(self, ctx, line):
        word, _, rest = line.partition(" ")
        sid, cwd = ctx["id"], ctx["cwd"]
        if word == "say":
            self.say(ctx, rest)
        elif word == "think":
            self.say(ctx, rest, "agent_thought_chunk")
        elif word == "plan":
            entries = [
                {"content": e.strip(), "priority": "medium", "status": "pending"} for e in rest.split(";")
            ]
            self.update(sid, {"sessionUpdate": "plan", "entries": entries})
        elif word == "run":

            def work():
                done = subprocess.run(
                    ["/bin/sh", "-c", rest], cwd=cwd, capture_output=True, text=True, timeout=30
                )
                return done.returncode == 0, (done.stdout + done.stderr).strip()

            self.tool(ctx, "execute", f"`{rest}`", {"command": rest}, work)
        elif word in ("write", "read"):
            path, _, content = rest.partition(" :: ")
            path = os.path.join(cwd, path.strip())
            fs = self.client_caps.get("fs") or {}

            def work():
                method = "fs/write_text_file" if word == "write" else "fs/read_text_file"
                if not fs.get("writeTextFile" if word == "write" else "readTextFile"):
                    return False, f"the client has no {method}"
                params = {"sessionId": sid, "path": path}
                if word == "write":
                    params["content"] = content
                answer = call_client(method, params)
                if "error" in answer:
                    return False, f"error: {answer['error'].get('message')}"
                return True, content if word == "write" else answer["result"]["content"]

            output = self.tool(
                ctx, "edit" if word == "write" else "read", f"{word} {path}", {"path": path}, work
            )
            if word == "read" and output is not None:
                self.say(ctx, f"read: {output}")
        elif word == "wait":
            self.say(ctx, f"waiting for {rest}", "agent_thought_chunk")
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(cwd, rest)) and time.monotonic() < deadline:
                if sid in CANCELLED:
                    return "cancelled"
                time.sleep(0.02)
        elif word == "hold":
            self.say(ctx, "holding", "agent_thought_chunk")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if sid in CANCELLED and not self.args.ignore_cancel:
                    return "cancelled"
                time.sleep(0.02)
        elif word == "env":
            self.say(ctx, f"{rest}={os.environ.get(rest, 'unset')}\n")
        elif word == "count":
            self.say(ctx, f"prompts={ctx['data']['prompts']}\n")
        elif word == "pid":
            self.say(ctx, f"pid={os.getpid()}\n")
        elif word == "spawn":
            # A child of its process group that ignores SIGTERM and holds none of its pipes.
            child = subprocess.Popen(
                ["sleep", "60"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
            )
            self.say(ctx, f"child={child.pid}\n")
        elif word == "crash":
            sys.stderr.write("acp_agent: crashing as asked\n")
            sys.stderr.flush()
            os._exit(3)
        elif word == "stop":
            return rest
        elif word == "error":
            return RuntimeError(rest)
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--no-load", action="store_true")
    parser.add_argument("--ask", action="store_true")
    parser.add_argument("--ignore-cancel", action="store_true")
    parser.add_argument("--protocol", type=int, default=1)
    parser.add_argument("--late-replay", action="store_true")
    parser.add_argument("--no-mcp-stdio", action="store_true")  # says it takes no stdio MCP servers
    args = parser.parse_args()
    os.makedirs(args.store, exist_ok=True)
    agent = Agent(args)
    threading.Thread(target=reader, daemon=True).start()
    methods = {
        "initialize": agent.initialize,
        "session/new": agent.session_new,
        "session/load": agent.session_load,
        "session/prompt": agent.session_prompt,
    }
    while True:
        message = WORK.get()
        if message is None:
            return 0
        method = methods.get(message["method"])
        if method is None:
            if "id" in message:
                send(
                    {
                        "id": message["id"],
                        "error": {"code": -32601, "message": f"Method not found: {message['method']}"},
                    }
                )
            continue
        try:
            result = method(message.get("params") or {})
        except Exception as exc:  # an error answer, as the spec's agents give
            send({"id": message["id"], "error": {"code": -32603, "message": str(exc)}})
            continue
        send({"id": message["id"], "result": result})
        if agent.replay_after is not None:
            session_id, agent.replay_after = agent.replay_after, None
            time.sleep(0.05)
            agent.replay(session_id)


if __name__ == "__main__":
    sys.exit(main())
