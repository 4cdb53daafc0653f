"""Baseline servers, each run in its own process like a bridge: plain ``websockets`` (the
sync server the bridge uses), no product code on the sending side.

``python -m benchmarks._baseline_server chunks PARTS BATCH``
    On every connection: wait for one text frame, then send ``PARTS`` text-delta parts,
    pre-encoded before the first connection as Chunk frames of ``BATCH`` parts (the bridge's
    batch bound), one Chunk then the host's Ack before the next, then an Exit: the
    transport limit of this stack.
``python -m benchmarks._baseline_server paced``
    On every connection: wait for one text frame, a JSON object ``{"n": N, "rate": R, "text":
    T}``; then send ``N`` Chunk frames of one text-delta part each (the frame the bridge sends
    for a lone delta), delta ``i`` due at ``t0 + i / R``, each followed by the host's Ack
    before the next (one server thread per connection, as the bridge's sender); then an Exit
    whose ``emit_ns`` lists ``time.monotonic_ns()`` just before each send: the transport's own
    cost of a paced model stream.
``python -m benchmarks._baseline_server echo``
    Answers every text frame with the same text: a bare request/response round trip.

Each prints ``PORT <n>`` on stdout once listening and stops when its stdin closes.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import List

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve


def part_json(index: int) -> str:
    """A one-character text-delta part as the bridge stores it (compact JSON)."""
    return '{"type":"text-delta","index":%d,"step":0,"attempt":1,"text":"y"}' % index


def chunk_frames(parts: int, batch: int) -> List[str]:
    """The Chunk frames of ``parts`` text deltas, ``batch`` per frame, request id ``"2"``."""
    frames = []
    for start in range(0, parts, batch):
        values = ",".join(part_json(i) for i in range(start, min(start + batch, parts)))
        frames.append('{"_tag":"Chunk","requestId":"2","values":[%s]}' % values)
    return frames


EXIT = '{"_tag":"Exit","requestId":"2","exit":{"_tag":"Success","value":null}}'

PACED_FRAME = ('{"_tag":"Chunk","requestId":"2","values":[{"type":"text-delta","index":%d,"step":0,'
               '"attempt":1,"text":%s}]}')


def paced_handler(ws: ServerConnection) -> None:
    """Send one paced stream (see the module docstring) on ``ws``."""
    try:
        spec = json.loads(ws.recv())
        n, rate, text = int(spec["n"]), float(spec["rate"]), json.dumps(spec.get("text", "abcd"))
        interval = 1.0 / rate if rate > 0 else 0.0
        stamps = [0] * n
        t0 = time.monotonic()
        for i in range(n):
            wait = t0 + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            stamps[i] = time.monotonic_ns()
            ws.send(PACED_FRAME % (i + 2, text))
            ws.recv()  # the Ack
        ws.send(json.dumps({"_tag": "Exit", "requestId": "2", "emit_ns": stamps}))
        ws.recv()
    except ConnectionClosed:
        pass


def main(argv: List[str]) -> int:
    mode = argv[0]
    if mode == "chunks":
        frames = chunk_frames(int(argv[1]), int(argv[2]))

        def handler(ws: ServerConnection) -> None:
            try:
                ws.recv()
                for frame in frames:
                    ws.send(frame)
                    ws.recv()  # the Ack
                ws.send(EXIT)
                ws.recv()
            except ConnectionClosed:
                pass

    elif mode == "paced":
        handler = paced_handler

    elif mode == "echo":

        def handler(ws: ServerConnection) -> None:
            try:
                for message in ws:
                    ws.send(message)
            except ConnectionClosed:
                pass

    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    with serve(handler, "127.0.0.1", 0, compression=None, max_size=16 * 1024 * 1024) as server:
        port = server.socket.getsockname()[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"PORT {port}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin (or kills us)
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
