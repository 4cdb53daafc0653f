"""C09: the host sends ``ReadTurn`` right behind ``StartTurn`` (the turn id is its own), and the
parts it yields are exactly those of the read it would have opened after StartTurn's answer,
whatever that answer is and whatever order a bridge serves the two in.

A scripted bridge (a websockets server on loopback, found through a listening file like any
bridge) answers Hello and OpenSession and plays each test's StartTurn and ReadTurn.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Dict, Iterator, List

import pytest
from websockets.sync.server import ServerConnection, serve

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.wire.frames import parse_frame
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

HELLO = {
    "agentId": "echo", "instance": "i-1", "protocol": 1, "pid": 4242, "startedAt": "2026-01-01T00:00:00.000Z",
}


def _exit(request_id: Any, value: Any) -> str:
    return json.dumps({"_tag": "Exit", "requestId": request_id, "exit": {"_tag": "Success", "value": value}})


def _fail(request_id: Any, error: Dict[str, Any]) -> str:
    cause = [{"_tag": "Fail", "error": error}]
    return json.dumps({"_tag": "Exit", "requestId": request_id, "exit": {"_tag": "Failure", "cause": cause}})


def _chunk(request_id: Any, values: List[Dict[str, Any]]) -> str:
    return json.dumps({"_tag": "Chunk", "requestId": request_id, "values": values})


def turn_parts(session_id: str, turn_id: str, prompt: str, text: str, bridge_id: str) -> List[Dict[str, Any]]:
    """A whole one-step turn whose one text delta is ``text``."""
    state = {
        "protocol": 1, "agentId": "echo", "bridgeId": bridge_id, "sessionId": session_id,
        "turnId": turn_id, "prompt": prompt, "startedAt": "2026-01-01T00:00:00.000Z",
    }
    return [
        {"type": "turn-start", "index": 0, "step": None, "attempt": 1, "turn": state},
        {"type": "step-start", "index": 1, "step": 0, "attempt": 1},
        {"type": "text-delta", "index": 2, "step": 0, "attempt": 1, "text": text},
        {"type": "step-finish", "index": 3, "step": 0, "attempt": 1, "finishReason": "stop", "usage": None},
        {"type": "turn-finish", "index": 4, "step": None, "attempt": 1, "finishReason": "stop", "usage": None,
         "error": None},
    ]


Play = Callable[["ScriptedBridge", ServerConnection, Any], None]


class ScriptedBridge:
    """Answers Hello and OpenSession; hands every other request to ``play(bridge, ws,
    message)``. ``received`` lists the requests in arrival order, ``waiting`` holds StartTurn
    requests a test answers later."""

    def __init__(self, session: bc.Session, play: "Play") -> None:
        self.session = session
        self.play = play
        self.received: List[Dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None)
        self.port = int(self._server.socket.getsockname()[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def parts(self, turn_id: str, prompt: str, text: str) -> List[Dict[str, Any]]:
        return turn_parts(self.session.id, turn_id, prompt, text, self.session.bridge_id)

    def tags(self) -> List[str]:
        with self.lock:
            return [m["tag"] for m in self.received]

    def _handle(self, ws: ServerConnection) -> None:
        try:
            for data in ws:
                for message in parse_frame(data):  # the host may send a batch (a JSON array)
                    self._message(ws, message)
        except Exception:
            pass  # the host went away

    def _message(self, ws: ServerConnection, message: Dict[str, Any]) -> None:
        if message.get("_tag") != "Request":
            return
        with self.lock:
            self.received.append(message)
        if message["tag"] == "Hello":
            ws.send(_exit(message["id"], {**HELLO, "bridgeId": self.session.bridge_id}))
        elif message["tag"] == "OpenSession":
            ws.send(_exit(message["id"], {"sessionId": self.session.id, "revision": 0, "data": None}))
        elif message["tag"] == "CloseSession":  # the release at teardown: at once, not
            # after the host's keepalive gives up on an unanswered request (2.5 s)
            ws.send(_exit(message["id"], {"sessionId": self.session.id, "revision": 0, "data": None}))
        else:
            self.play(self, ws, message)

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


@pytest.fixture
def scripted(sandbox) -> Iterator[Callable[..., ScriptedBridge]]:
    """``make(play)``: a session (returned as ``bridge.session``) whose bridge is a
    ScriptedBridge; both are released and closed afterwards."""
    made: List[ScriptedBridge] = []

    def make(play: Callable[[ScriptedBridge, ServerConnection, Any], None]) -> ScriptedBridge:
        session = bc.create_session(
            options("echo"), session_options(sandbox, resend_window=5.0, ping_interval=0.5, ping_timeout=2.0)
        )
        bridge = ScriptedBridge(session, play)
        made.append(bridge)
        info = identity.ListeningInfo(
            1, "echo", session.bridge_id, "127.0.0.1", bridge.port, 4242, "i-1", "x"
        )
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        identity.secure_write(os.path.join(state_dir, identity.LISTENING_FILE), info.to_json().encode())
        return bridge

    yield make
    for bridge in made:
        bridge.session.release()
        bridge.close()


def _texts(turn: Any) -> List[str]:
    return [p.text for p in turn if isinstance(p, bc.TextDelta)]


def test_c09_read_turn_goes_out_before_start_turn_is_answered(scripted):
    # StartTurn is answered only once ReadTurn has arrived: a host that waited for the answer
    # before sending ReadTurn would never get it.
    arrived = threading.Event()
    held: List[Any] = []

    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        if message["tag"] == "StartTurn":
            held.append(message)
        elif message["tag"] == "ReadTurn":
            arrived.set()
            start = held[0]
            ws.send(_exit(start["id"], {"turnId": start["payload"]["turnId"], "status": "started"}))
            payload = message["payload"]
            ws.send(_chunk(message["id"], bridge.parts(payload["turnId"], "hi", "hello")))
            ws.send(_exit(message["id"], None))

    bridge = scripted(play)
    turn = bridge.session.turn("hi", turn_id="t-1")
    assert arrived.is_set()
    assert _texts(turn) == ["hello"]
    assert bridge.tags() == ["Hello", "OpenSession", "StartTurn", "ReadTurn"]
    read = bridge.received[-1]["payload"]
    assert (read["offset"], read["afterStep"]) == (0, 0)


def test_c09_turn_conflict_never_yields_the_pipelined_streams_parts(scripted):
    # A bridge out of order: it streams the turn id's other turn (another prompt) to the
    # ReadTurn, then answers StartTurn with TurnConflict. Nothing of that stream is yielded.
    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        if message["tag"] == "StartTurn":
            with bridge.lock:
                bridge.start = message  # type: ignore[attr-defined]
        elif message["tag"] == "ReadTurn":
            ws.send(_chunk(message["id"], bridge.parts(message["payload"]["turnId"], "other", "NOT YOURS")))
            ws.send(_exit(message["id"], None))
            start = bridge.start  # type: ignore[attr-defined]
            turn_id = start["payload"]["turnId"]
            error = {"_tag": "TurnConflict", "message": "another prompt", "turnId": turn_id}
            ws.send(_fail(start["id"], error))

    bridge = scripted(play)
    with pytest.raises(bc.TurnConflict):
        bridge.session.turn("mine", turn_id="t-taken")
    conn = bridge.session._conn
    assert conn is not None and not conn._pending, "the pipelined stream was closed, unread"
    assert bridge.session._active_turn is None


def test_c09_turn_conflict_from_our_bridge_leaves_no_stream_and_the_session_goes_on(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        first = session.turn("a b", turn_id="t-same")
        assert first.text() == "" and "".join(_texts(first)) == "a b"
        with pytest.raises(bc.TurnConflict):
            session.turn("c d", turn_id="t-same")  # our bridge would stream t-same's parts
        conn = session._conn
        assert conn is not None and not [p for p in conn._pending.values() if p.outcome is None]
        again = session.turn("e f")
        assert "".join(_texts(again)) == "e f"
        assert again.status == "started"


def test_c09_a_bridge_that_serves_read_turn_first_is_read_again_after_start_turn(scripted):
    # The ReadTurn reaches a turn that does not exist yet (TurnNotFound); after StartTurn's
    # answer the host reads again from the cursor, and from then on sends the two in turn.
    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        payload = message["payload"]
        if message["tag"] == "StartTurn":
            with bridge.lock:
                known = getattr(bridge, "known", set())
                status = "running" if payload["turnId"] in known else "started"
                bridge.known = known | {payload["turnId"]}  # type: ignore[attr-defined]
            ws.send(_exit(message["id"], {"turnId": payload["turnId"], "status": status}))
        elif message["tag"] == "ReadTurn":
            if payload["turnId"] not in getattr(bridge, "known", set()):
                error = {"_tag": "TurnNotFound", "message": "no such turn", "turnId": payload["turnId"]}
                ws.send(_fail(message["id"], error))
                return
            ws.send(_chunk(message["id"], bridge.parts(payload["turnId"], "hi", "hello")[payload["offset"]:]))
            ws.send(_exit(message["id"], None))

    bridge = scripted(play)
    original = bridge.play

    def read_first(b: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        # Serve the pipelined ReadTurn before the StartTurn it follows.
        if message["tag"] == "StartTurn":
            with b.lock:
                b.pending_start = message  # type: ignore[attr-defined]
            return
        original(b, ws, message)
        start = getattr(b, "pending_start", None)
        if start is not None:
            b.pending_start = None  # type: ignore[attr-defined]
            original(b, ws, start)

    bridge.play = read_first
    turn = bridge.session.turn("hi", turn_id="t-late")
    parts = list(turn)
    assert [p.index for p in parts] == [0, 1, 2, 3, 4], "every part once"
    assert turn.text() == "hello"
    assert bridge.tags()[2:] == ["StartTurn", "ReadTurn", "ReadTurn"]
    # The next turn of the session is not pipelined on this turn object's word: a new turn
    # pipelines again (each Turn decides for itself).
    bridge.play = original
    assert _texts(bridge.session.turn("hi", turn_id="t-next")) == ["hello"]


def test_c09_c13_a_continued_turn_is_read_again_after_the_answer_never_from_the_pipelined_stream(scripted):
    # "continued": the bridge reset the turn's open step, and only a read sent after the answer
    # is sure to see that (a bridge out of order may have read the log before): the turn is
    # read again from the same place, and the pipelined stream's parts (WRONG) never yielded.
    reads: List[Dict[str, Any]] = []

    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        payload = message["payload"]
        if message["tag"] == "StartTurn":
            ws.send(_exit(message["id"], {"turnId": payload["turnId"], "status": "continued"}))
        elif message["tag"] == "ReadTurn":
            reads.append(payload)
            text = "WRONG" if len(reads) == 1 else "right"
            ws.send(_chunk(message["id"], bridge.parts(payload["turnId"], "hi", text)[payload["offset"]:]))
            ws.send(_exit(message["id"], None))

    bridge = scripted(play)
    turn = bridge.session.turn("hi", turn_id="t-cont")
    parts = list(turn)
    assert turn.status == "continued"
    assert turn.text() == "right"
    assert [p.index for p in parts] == [0, 1, 2, 3, 4]
    assert len(reads) == 2 and reads[0] == reads[1]


def test_c09_b09_overloaded_start_turn_closes_the_pipelined_stream_and_starts_again(scripted):
    # StartTurn is Overloaded once (nothing started): the ReadTurn behind it finds no turn. The
    # host sends both again after a pause and reads the turn once.
    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        payload = message["payload"]
        with bridge.lock:
            count = getattr(bridge, "starts", 0)
        if message["tag"] == "StartTurn":
            with bridge.lock:
                bridge.starts = count + 1  # type: ignore[attr-defined]
            if count == 0:
                error = {"_tag": "Overloaded", "message": "busy", "turnId": payload["turnId"]}
                ws.send(_fail(message["id"], error))
            else:
                ws.send(_exit(message["id"], {"turnId": payload["turnId"], "status": "started"}))
        elif message["tag"] == "ReadTurn":
            if count < 2:
                error = {"_tag": "TurnNotFound", "message": "no such turn", "turnId": payload["turnId"]}
                ws.send(_fail(message["id"], error))
                return
            ws.send(_chunk(message["id"], bridge.parts(payload["turnId"], "hi", "hello")))
            ws.send(_exit(message["id"], None))

    bridge = scripted(play)
    turn = bridge.session.turn("hi", turn_id="t-busy")
    parts = list(turn)
    assert [p.index for p in parts] == [0, 1, 2, 3, 4]
    assert turn.text() == "hello"
    assert bridge.tags()[2:] == ["StartTurn", "ReadTurn", "StartTurn", "ReadTurn"]


def test_c08_c09_a_drop_between_start_turn_and_read_turn_resumes_exactly(scripted):
    # The connection drops after StartTurn's answer and before any Chunk of the pipelined
    # read: the host connects again (the same bridge instance: no StartTurn again) and reads
    # every part once, as after a drop of an unpipelined read.
    def play(bridge: ScriptedBridge, ws: ServerConnection, message: Any) -> None:
        payload = message["payload"]
        if message["tag"] == "StartTurn":
            with bridge.lock:
                first = not getattr(bridge, "started", False)
                bridge.started = True  # type: ignore[attr-defined]
            status = "started" if first else "running"
            ws.send(_exit(message["id"], {"turnId": payload["turnId"], "status": status}))
        elif message["tag"] == "ReadTurn":
            with bridge.lock:
                dropped = getattr(bridge, "dropped", False)
                bridge.dropped = True  # type: ignore[attr-defined]
            if not dropped:
                ws.close()
                return
            ws.send(_chunk(message["id"], bridge.parts(payload["turnId"], "hi", "hello")[payload["offset"]:]))
            ws.send(_exit(message["id"], None))

    bridge = scripted(play)
    turn = bridge.session.turn("hi", turn_id="t-drop")
    parts = list(turn)
    assert [p.index for p in parts] == [0, 1, 2, 3, 4]
    assert turn.text() == "hello"
    assert turn.status == "started"
    assert bridge.tags()[2:] == ["StartTurn", "ReadTurn", "Hello", "OpenSession", "ReadTurn"]
