"""B08: a bounded fuzz against a live bridge: random and mutated frames (a few thousand per
run, about 12 s at most) over several connections at once. The bridge must not crash, must
still answer every connection (no hang), and must end with no more threads than it had
before (no thread leak; counted in /proc/<pid>/task).

The seed is random per run and printed on failure; set BRIDGE_CLIENT_FUZZ_SEED to replay one.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from typing import Any, Dict

import pytest
import websocket

from bridge_harness import wait_until
from bridge_client.bridge.turn_threads import MAX_IDLE
from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(90)

MAX_FRAMES = 4000
TIME_BUDGET = 12.0  # seconds of sending, whatever the machine's speed
CONNECTIONS = 3

_TAGS = ["Request", "Ack", "Interrupt", "Ping", "Eof", "Chunk", "Exit", "Defect", "Pong", "", None, 7]
_RPCS = [
    "Hello",
    "OpenSession",
    "StartTurn",
    "ReadTurn",
    "CancelTurn",
    "CloseSession",
    "hello",
    "",
    "X" * 300,
]
_KEYS = [
    "_tag",
    "id",
    "tag",
    "payload",
    "headers",
    "requestId",
    "sessionId",
    "turnId",
    "prompt",
    "offset",
    "afterStep",
    "state",
    "revision",
    "data",
    "values",
    "exit",
]


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class _Gen:
    """Makes frames: valid ones, valid ones mutated, random JSON, random bytes."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sessions = [f"s{i}" for i in range(4)]
        self.turns = [f"t{i}" for i in range(6)]

    def scalar(self) -> Any:
        r = self.rng
        return r.choice(
            [
                None,
                True,
                False,
                0,
                -1,
                1,
                2**53,
                2**64,
                -(2**63),
                1.5,
                float(r.random()),
                "",
                "x" * r.randint(0, 40),
                "\ud800",
                "é→🙂",
                "../../etc/passwd",
                "'; DROP TABLE parts; --",
                "\x00",
                "a/b",
                "." * 3,
                r.choice(self.sessions),
                r.choice(self.turns),
                r.randint(-5, 50),
            ]
        )

    def value(self, depth: int = 0) -> Any:
        r = self.rng
        roll = r.random()
        if depth > 3 or roll < 0.5:
            return self.scalar()
        if roll < 0.75:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {r.choice(_KEYS): self.value(depth + 1) for _ in range(r.randint(0, 5))}

    def payload(self, rpc: str) -> Any:
        r = self.rng
        sid, tid = r.choice(self.sessions), r.choice(self.turns)
        return {
            "Hello": None,
            "OpenSession": {
                "sessionId": sid,
                "state": r.choice(
                    [None, {"sessionId": sid, "revision": r.randint(0, 9), "data": self.value()}]
                ),
            },
            "StartTurn": {"sessionId": sid, "turnId": tid, "prompt": r.choice(["hi", "a b c", "", "x" * 50])},
            "ReadTurn": {
                "sessionId": sid,
                "turnId": tid,
                "offset": r.randint(0, 8),
                "afterStep": r.randint(0, 2),
            },
            "CancelTurn": {"sessionId": sid, "turnId": tid},
            "CloseSession": {"sessionId": sid},
        }.get(rpc, self.value())

    def valid(self, next_id: int) -> Dict[str, Any]:
        r = self.rng
        kind = r.random()
        rid: Any = r.choice([next_id, str(next_id)])
        if kind < 0.7:
            rpc = r.choice(_RPCS[:6])
            return {"_tag": "Request", "id": rid, "tag": rpc, "payload": self.payload(rpc), "headers": []}
        if kind < 0.8:
            return {"_tag": "Ack", "requestId": r.choice([rid, next_id - 1, str(next_id - 1)])}
        if kind < 0.9:
            return {"_tag": "Interrupt", "requestId": r.choice([rid, next_id - 1, str(next_id - 1)])}
        return {"_tag": r.choice(["Ping", "Eof"])}

    def mutate(self, obj: Dict[str, Any]) -> Any:
        r = self.rng
        obj = dict(obj)
        for _ in range(r.randint(1, 3)):
            op = r.random()
            if op < 0.3 and obj:
                del obj[r.choice(list(obj))]
            elif op < 0.6 and obj:
                obj[r.choice(list(obj))] = self.value()
            elif op < 0.8:
                obj[r.choice(_KEYS)] = self.value()
            else:
                obj["_tag"] = r.choice(_TAGS)
        return obj

    def text_mutation(self, text: str) -> str:
        r = self.rng
        chars = list(text)
        for _ in range(r.randint(1, 4)):
            if not chars:
                break
            i = r.randrange(len(chars))
            op = r.random()
            if op < 0.4:
                del chars[i]
            elif op < 0.8:
                chars.insert(i, r.choice('{}[]",:\\0aZ\u00e9'))
            else:
                chars = chars[:i]
        return "".join(chars)

    def frame(self, next_id: int) -> Any:
        r = self.rng
        roll = r.random()
        if roll < 0.25:
            return json.dumps(self.valid(next_id))
        if roll < 0.55:
            return json.dumps(self.mutate(self.valid(next_id)))
        if roll < 0.7:
            return self.text_mutation(json.dumps(self.valid(next_id)))
        if roll < 0.8:
            return json.dumps(self.value())
        if roll < 0.9:
            batch = [
                self.mutate(self.valid(next_id + i)) if r.random() < 0.5 else self.valid(next_id + i)
                for i in range(r.randint(0, 4))
            ]
            return json.dumps(batch)
        if roll < 0.95:
            return json.dumps(self.valid(next_id)).encode("utf-8")  # binary frame
        return bytes(r.randrange(256) for _ in range(r.randint(0, 64)))  # binary garbage


def _drain(ws: websocket.WebSocket, stop: threading.Event, counts: Dict[str, int]) -> None:
    """Read (and count) whatever the bridge answers until told to stop or the socket closes."""
    ws.settimeout(0.2)
    while not stop.is_set():
        try:
            data = ws.recv()
        except websocket.WebSocketTimeoutException:
            continue
        except (websocket.WebSocketException, OSError):
            return
        try:
            for obj in (
                json.loads(data) if isinstance(data, str) and data.startswith("[") else [json.loads(data)]
            ):
                counts[obj.get("_tag", "?")] = counts.get(obj.get("_tag", "?"), 0) + 1
        except ValueError:
            counts["not JSON"] = counts.get("not JSON", 0) + 1


def test_b08_bounded_fuzz_no_crash_no_hang_no_thread_leak(make_bridge):
    seed = int(os.environ.get("BRIDGE_CLIENT_FUZZ_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    bridge = make_bridge(options={"steps": 1})
    pid = bridge.proc.pid
    # Warm up (first connection, first turn) before counting threads.
    with bridge.connect() as warm:
        warm.open("warm")
        warm.start("warm", "warm-t", "hi")
        warm.read("warm", "warm-t")
    time.sleep(0.2)  # the warm-up connection's thread ends
    baseline = _threads(pid)

    gen = _Gen(rng)
    clients = [bridge.connect() for _ in range(CONNECTIONS)]
    stop = threading.Event()
    counts: Dict[str, int] = {}
    drains = [threading.Thread(target=_drain, args=(c.ws, stop, counts), daemon=True) for c in clients]
    for t in drains:
        t.start()
    sent = 0
    deadline = time.monotonic() + TIME_BUDGET
    try:
        while sent < MAX_FRAMES and time.monotonic() < deadline:
            client = clients[sent % CONNECTIONS]
            frame = gen.frame(sent * 10)
            try:
                if isinstance(frame, bytes):
                    client.ws.send_binary(frame)
                else:
                    client.ws.send(frame)
            except (websocket.WebSocketException, OSError) as exc:
                raise AssertionError(
                    f"seed {seed}: connection dropped after {sent} frames: {exc!r}; "
                    f"last frame {frame[:300]!r}\n"
                    f"{bridge.log()[-3000:]}"
                ) from None
            sent += 1
            if sent % 500 == 0:
                assert bridge.proc.poll() is None, f"seed {seed}: the bridge died after {sent} frames"
    finally:
        stop.set()
        for t in drains:
            t.join(2)
    assert bridge.proc.poll() is None, f"seed {seed}: the bridge died\n{bridge.log()[-3000:]}"
    assert sent >= 500, f"seed {seed}: only {sent} frames in {TIME_BUDGET} s"
    # No hang: every fuzzed connection still answers a Ping, then Hello.
    for client in clients:
        client.ws.settimeout(10)
        client.send(frames.Ping())
        while True:
            message = client.recv()
            if message.get("_tag") == "Pong":
                break
        # An id the fuzz never sends: a late Exit of a fuzzed request must not be taken for this one.
        exit_ = client.wait_exit(client.request("Hello", None, request_id="hello-after-the-fuzz"))
        assert exit_["_tag"] == "Success" and exit_["value"]["agentId"] == "echo", f"seed {seed}: {exit_}"
    for client in clients:
        client.close()
    # No thread leak: once the fuzz connections are closed, the bridge is back to its baseline,
    # but for the finished turns' threads it keeps for the next turns (at most MAX_IDLE, each
    # for 30 s: fuzzed StartTurns of several sessions may have run turns at once).
    assert wait_until(lambda: _threads(pid) <= baseline + MAX_IDLE, 15.0), (
        f"seed {seed}: {_threads(pid)} threads after the fuzz, {baseline} before (+{MAX_IDLE} kept)"
    )
    with bridge.connect() as after:
        assert after.value("Hello")["agentId"] == "echo"
    assert "Traceback" not in bridge.log(), (
        f"seed {seed}: a fuzzed frame reached a bug path:\n{bridge.log()[-3000:]}"
    )
    print(f"fuzz seed {seed}: {sent} frames sent, answers {sorted(counts.items())}")
