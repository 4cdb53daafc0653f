"""A fuzz of the batch answer to StartTurn over one connection of a
real bridge: random writes of StartTurn+ReadTurn pairs (one batch frame or two frames, an
Interrupt of the read in the same batch), StartTurns of existing turns, reads at other
offsets, Pings, bad JSON, binary frames and Hellos, each write in one socket write. Checked:
one Exit per request, no Chunk of a new turn's read before its StartTurn's Exit, one Chunk in
flight per stream until its Ack, contiguous offsets, Exit Success only after turn-finish, a
Pong per Ping and a Defect per bad frame
the connection serves on throughout."""

from __future__ import annotations

import json
import random
import time

import pytest
import websocket

from bridge_harness import TOKEN

pytestmark = pytest.mark.timeout(120)


def fb(text, opcode=websocket.ABNF.OPCODE_TEXT):
    return websocket.ABNF.create_frame(text, opcode).format()


def req(rid, tag, payload):
    return {"_tag": "Request", "id": rid, "tag": tag, "payload": payload, "headers": []}


class Checker:
    def __init__(self, ws, rng):
        self.ws, self.rng = ws, rng
        self.pending = {}  # rid -> (kind, info)
        self.reads = {}  # rid -> dict(next=offset, inflight=False, turn=..)
        self.started = set()  # turns whose StartTurn Exit arrived
        self.defects = 0
        self.pongs = 0
        self.want_defects = 0
        self.want_pongs = 0
        self.unacked = []

    def handle(self, m):
        tag = m["_tag"]
        if tag == "Pong":
            self.pongs += 1
            return
        if tag == "Defect":
            self.defects += 1
            return
        rid = m["requestId"]
        assert rid in self.pending, ("answer for unknown/finished rid", m)
        kind, info = self.pending[rid]
        if tag == "Chunk":
            assert kind == "read", m
            r = self.reads[rid]
            assert not r["inflight"], ("two Chunks in flight", rid)
            assert r["turn"] in self.started or r["old"], ("Chunk before its StartTurn's Exit", m)
            idx = [v["index"] for v in m["values"]]
            assert idx == list(range(r["next"], r["next"] + len(idx))), (idx, r)
            r["next"] += len(idx)
            r["inflight"] = True
            if any(v["type"] == "turn-finish" for v in m["values"]):
                r["finished"] = True
            self.unacked.append(rid)
        else:
            assert tag == "Exit", m
            del self.pending[rid]
            ex = m["exit"]
            if kind == "start":
                if ex["_tag"] == "Success":
                    self.started.add(info)
            elif kind == "read":
                r = self.reads.pop(rid)
                if ex["_tag"] == "Success":
                    assert r.get("finished"), ("Exit Success before turn-finish", r)
                else:
                    assert ex["_tag"] == "Failure" and ex["cause"], m
                    assert r["interrupted"] or r["expect_fail"], (m, r)

    def drain(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while self.pending or self.pongs < self.want_pongs or self.defects < self.want_defects:
            assert time.monotonic() < deadline, (
                "stuck",
                self.pending,
                self.reads,
                self.pongs,
                self.want_pongs,
                self.defects,
                self.want_defects,
            )
            # ack some
            while self.unacked and self.rng.random() < 0.9:
                rid = self.unacked.pop(0)
                if rid in self.reads:
                    self.reads[rid]["inflight"] = False
                    self.ws.send(json.dumps({"_tag": "Ack", "requestId": rid}))
            self.ws.settimeout(0.05 if self.unacked else 5)
            try:
                raw = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                continue
            got = json.loads(raw)
            for m in got if isinstance(got, list) else [got]:
                self.handle(m)


def _one(seed, bridge, rounds):
    rng = random.Random(seed)
    ws = websocket.create_connection(bridge.url, header=[f"Authorization: Bearer {TOKEN}"], timeout=10)
    c = Checker(ws, rng)
    rid_n = [1000]

    def rid():
        rid_n[0] += 1
        return rid_n[0] if rng.random() < 0.5 else str(rid_n[0])

    ws.send(json.dumps(req(1, "OpenSession", {"sessionId": "s", "state": None})))
    c.pending[1] = ("call", None)
    c.drain()
    turns = []
    for r_ in range(rounds):
        items = []  # list of (json obj or raw), grouped into frames
        for _ in range(rng.randint(1, 6)):
            k = rng.random()
            if k < 0.35 or not turns:
                t = f"t{seed}-{r_}-{len(items)}"
                turns.append(t)
                a, b = rid(), rid()
                c.pending[a] = ("start", t)
                c.pending[b] = ("read", None)
                c.reads[b] = dict(
                    next=0, inflight=False, turn=t, old=False, interrupted=False, expect_fail=False
                )
                pair = [
                    req(
                        a,
                        "StartTurn",
                        {
                            "sessionId": "s",
                            "turnId": t,
                            "prompt": " ".join("w%d" % i for i in range(rng.randint(1, 8))),
                        },
                    ),
                    req(b, "ReadTurn", {"sessionId": "s", "turnId": t, "offset": 0, "afterStep": 0}),
                ]
                if rng.random() < 0.2:
                    ir = {"_tag": "Interrupt", "requestId": b}
                    c.reads[b]["interrupted"] = True
                    pair.append(ir)
                if rng.random() < 0.5:
                    items.append(pair)  # one batch frame
                else:
                    items.extend([[p] for p in pair])
            elif k < 0.5:
                t = rng.choice(turns)
                a = rid()
                c.pending[a] = ("start", t)
                items.append([req(a, "StartTurn", {"sessionId": "s", "turnId": t, "prompt": "again"})])
            elif k < 0.62:
                t = rng.choice(turns)
                b = rid()
                off = rng.choice([0, 0, 1, 3])
                c.pending[b] = ("read", None)
                c.reads[b] = dict(
                    next=off, inflight=False, turn=t, old=True, interrupted=False, expect_fail=True
                )
                items.append(
                    [req(b, "ReadTurn", {"sessionId": "s", "turnId": t, "offset": off, "afterStep": 0})]
                )
            elif k < 0.72:
                c.want_pongs += 1
                items.append([{"_tag": "Ping"}])
            elif k < 0.8:
                c.want_defects += 1
                items.append(rng.choice(["{not json", "[]", '"x"', "[1,2"]))
            elif k < 0.85:
                c.want_defects += 1
                items.append(b"\x00\x01binary")
            else:
                a = rid()
                c.pending[a] = ("call", None)
                items.append([req(a, "Hello", None)])
        data = b""
        for it in items:
            if isinstance(it, bytes):
                data += fb(it, websocket.ABNF.OPCODE_BINARY)
            elif isinstance(it, str):
                data += fb(it)
            else:
                data += fb(json.dumps(it if len(it) > 1 else it[0]))
        ws.sock.sendall(data)
        c.drain()
    ws.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_b03_b08_random_writes_around_the_batch_answer_keep_the_stream_rules(make_bridge, seed):
    bridge = make_bridge(options={"steps": 2, "chunks": 3, "delay": 0.002 if seed == 3 else 0.0})
    _one(seed, bridge, 15)
