"""C18 broken on purpose: garbage AnswerApproval/SendMessage/OpenSession payloads over a raw
WebSocket, answers racing each other, an answer to a request the agent did not offer. Each bad
request gets a typed failure, the connection stays usable, the bridge logs no traceback."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Dict, List

import pytest

from bridge_harness import wait_until

pytestmark = pytest.mark.timeout(60)


class _Reader(threading.Thread):
    """Reads a turn to its end on its own connection, collecting parts."""

    def __init__(self, bridge: Any, sid: str, tid: str) -> None:
        super().__init__(daemon=True)
        self.conn = bridge.connect()
        self.sid, self.tid = sid, tid
        self.parts: List[Dict[str, Any]] = []
        self.exit: Any = None
        self.error: Any = None

    def run(self) -> None:
        try:
            self._read()
        except Exception as exc:  # the bridge was killed: the parts read so far stay
            self.error = exc
            self.conn.close()

    def _read(self) -> None:
        from bridge_client.wire import frames

        rid = self.conn.request(
            "ReadTurn", {"sessionId": self.sid, "turnId": self.tid, "offset": 0, "afterStep": 0}
        )
        while True:
            message = self.conn.recv()
            if message.get("requestId") != rid:
                continue
            if message["_tag"] == "Chunk":
                self.parts.extend(message["values"])
                self.conn.send(frames.Ack(rid))
            else:
                self.exit = message["exit"]
                self.conn.close()
                return

    def requests(self) -> List[Dict[str, Any]]:
        return [p for p in self.parts if p["type"] == "approval-request"]


def _start(bridge: Any, c: Any, prompt: str, **interactive: Any) -> tuple:
    sid, tid = f"s-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    payload = {"sessionId": sid, "interactive": {"approvals": True, **interactive}}
    c.value("OpenSession", payload)
    assert c.value("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt})["status"] == "started"
    reader = _Reader(bridge, sid, tid)
    reader.start()
    return sid, tid, reader


def _tag(causes: List[Dict[str, Any]]) -> str:
    (cause,) = causes
    assert cause["_tag"] == "Fail", cause
    return str(cause["error"]["_tag"])


def test_c18_garbage_answers_and_messages_get_typed_failures(make_bridge):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        base = {"sessionId": sid, "turnId": tid, "requestId": rid}
        bad: List[Any] = [
            None,
            [],
            "x",
            {**base},
            {**base, "decision": None},
            {**base, "decision": 1},
            {**base, "decision": ["deny"]},
            {**base, "decision": {"a": 1}},
            {**base, "decision": "yes"},
            {**base, "decision": "ALLOW-ONCE"},
            {**base, "decision": "deny", "message": 5},
            {**base, "decision": "deny", "message": "\ud800"},
            {**base, "decision": "deny", "message": "x" * (64 * 1024 + 1)},
            {**base, "decision": "deny", "by": "timeout"},
            {**base, "decision": "deny", "by": ["host"]},
            {**base, "decision": "deny", "by": {}},
            {**base, "requestId": 7, "decision": "deny"},
            {**base, "requestId": "", "decision": "deny"},
            {**base, "requestId": "a b", "decision": "deny"},
            {**base, "requestId": "x" * 10000, "decision": "deny"},
            {**base, "turnId": None, "decision": "deny"},
            {**base, "sessionId": {"a": 1}, "decision": "deny"},
        ]
        for payload in bad:
            assert _tag(c.causes("AnswerApproval", payload)) == "BadRequest", payload
        assert _tag(
            c.causes("AnswerApproval", {**base, "requestId": "9.9.9-deadbeef", "decision": "deny"})
        ) == ("ApprovalNotFound")
        other = f"s-{uuid.uuid4().hex[:10]}"
        c.value("OpenSession", {"sessionId": other})
        assert (
            _tag(c.causes("AnswerApproval", {**base, "sessionId": other, "decision": "deny"}))
            == "TurnNotFound"
        )
        assert (
            _tag(c.causes("AnswerApproval", {**base, "turnId": "t-nope", "decision": "deny"}))
            == "TurnNotFound"
        )
        mbase = {"sessionId": sid, "turnId": tid, "messageId": "m-1"}
        for payload in [
            {**mbase},
            {**mbase, "text": None},
            {**mbase, "text": 3},
            {**mbase, "text": ["a"]},
            {**mbase, "text": "\udfff"},
            {**mbase, "text": "y" * (1024 * 1024 + 1)},
            {**mbase, "messageId": 3, "text": "a"},
            {**mbase, "messageId": "", "text": "a"},
        ]:
            assert _tag(c.causes("SendMessage", payload)) == "BadRequest", str(payload)[:200]
        for interactive in [
            5,
            "yes",
            [],
            {"approvals": "yes"},
            {"approvals": 1},
            {"approvals": True, "approvalTimeout": 0},
            {"approvals": True, "approvalTimeout": -1},
            {"approvals": True, "approvalTimeout": "5"},
            {"approvals": True, "approvalTimeout": True},
            {"approvals": True, "approvalTimeout": 1e300},
            {"approvals": True, "approvalTimeout": float("nan")},
        ]:
            exit_ = c.call("OpenSession", {"sessionId": other, "interactive": interactive})
            assert exit_["_tag"] == "Failure", interactive
            assert _tag(exit_["cause"]) == "BadRequest", interactive
        # the connection is still usable, and the request still pending: answer it
        answer = c.value("AnswerApproval", {**base, "decision": "allow-once"})
        assert answer == {"requestId": rid, "decision": "allow-once", "message": None, "by": "host"}
        reader.join(20)
        assert reader.exit is not None and reader.exit["_tag"] == "Success"
        # after the turn finished
        assert c.value("AnswerApproval", {**base, "decision": "allow-once"}) == answer
        assert _tag(c.causes("AnswerApproval", {**base, "decision": "deny"})) == "ApprovalConflict"
        assert _tag(c.causes("SendMessage", {**mbase, "text": "late"})) == "TurnNotRunning"
    assert "Traceback" not in bridge.log()


@pytest.mark.parametrize("decisions", [("allow-once", "allow-once"), ("allow-once", "deny")])
def test_c18_two_hosts_answering_at_once_record_one_answer(make_bridge, decisions):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        conns = [bridge.connect() for _ in decisions]
        exits: List[Any] = [None, None]
        go = threading.Barrier(len(decisions))

        def answer(i: int) -> None:
            payload = {"sessionId": sid, "turnId": tid, "requestId": rid, "decision": decisions[i]}
            go.wait()
            exits[i] = conns[i].call("AnswerApproval", payload)

        threads = [threading.Thread(target=answer, args=(i,)) for i in range(len(decisions))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        for conn in conns:
            conn.close()
        reader.join(20)
        answers = [p for p in reader.parts if p["type"] == "approval-answer"]
        assert len(answers) == 1, reader.parts
        ok = [e for e in exits if e["_tag"] == "Success"]
        assert ok and all(e["value"]["decision"] == answers[0]["decision"] for e in ok)
        for e in exits:
            if e["_tag"] == "Failure":
                assert _tag(e["cause"]) == "ApprovalConflict"
    assert "Traceback" not in bridge.log()


def test_c18_many_messages_at_once_get_unique_ordered_offsets(make_bridge):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        results: Dict[str, Any] = {}

        def send(i: int) -> None:
            with bridge.connect() as conn:
                for j in range(5):
                    mid = f"m-{i}-{j}"
                    results[mid] = conn.call(
                        "SendMessage",
                        {"sessionId": sid, "turnId": tid, "messageId": mid, "text": f"echo {mid}"},
                    )

        threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 30 and all(e["_tag"] == "Success" for e in results.values())
        indexes = [e["value"]["index"] for e in results.values()]
        assert len(set(indexes)) == 30
        c.value("CancelTurn", {"sessionId": sid, "turnId": tid})
        reader.join(20)
        assert reader.exit is not None
        logged = [p for p in reader.parts if p["type"] == "user-message"]
        assert [p["messageId"] for p in logged] == sorted(results, key=lambda m: results[m]["value"]["index"])
        assert rid
    assert "Traceback" not in bridge.log()


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.2])
def test_c18_answer_racing_the_timeout_records_one_answer(make_bridge, delay):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one", approvalTimeout=0.3)
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        time.sleep(max(0.0, 0.3 - delay - 0.05))
        exit_ = c.call(
            "AnswerApproval",
            {"sessionId": sid, "turnId": tid, "requestId": rid, "decision": "allow-once"},
        )
        reader.join(20)
        answers = [p for p in reader.parts if p["type"] == "approval-answer"]
        assert len(answers) == 1
        if exit_["_tag"] == "Success":
            assert answers[0]["by"] == "host"
        else:
            assert _tag(exit_["cause"]) == "ApprovalExpired" and answers[0]["by"] == "timeout"
    assert "Traceback" not in bridge.log()


def test_c18_a_turn_continued_after_a_restart_still_asks_and_times_out(make_bridge, tmp_path):
    out = tmp_path / "ran"
    prompt = f"echo ran >> {out}"
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, prompt, approvalTimeout=2.0)
        wait_until(lambda: reader.requests(), timeout=15)
        first = reader.requests()[0]["requestId"]
        bridge.kill()  # while the request is pending, its timeout running
    reader.join(10)
    bridge.start()
    with bridge.connect() as c:
        # A host that continues the turn without opening the session again (its first request
        # on the new connection is StartTurn): the step runs again, asks again, times out.
        c.value("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt})
        reader = _Reader(bridge, sid, tid)
        reader.start()
        reader.join(30)
        assert reader.exit is not None and reader.exit["_tag"] == "Success"
        assert not out.exists(), "the command ran without being approved"
        requests = [r["requestId"] for r in reader.requests()]
        assert requests[-1] != first  # asked again, under a new id
        answers = [p for p in reader.parts if p["type"] == "approval-answer"]
        assert [(a["requestId"], a["decision"], a["by"]) for a in answers] == [
            (requests[-1], "deny", "timeout")
        ]
        expired = c.causes(
            "AnswerApproval", {"sessionId": sid, "turnId": tid, "requestId": first, "decision": "allow-once"}
        )
        assert _tag(expired) == "ApprovalExpired"
    assert "Traceback" not in bridge.log()


def test_c18_an_answer_the_request_did_not_offer_is_refused(tmp_path):
    # No built-in driver offers a subset (ACP agents do): drive the bridge's own TurnInteraction.
    from bridge_client.bridge.approvals import AlwaysAllowed, TurnInteraction
    from bridge_client.bridge.store import Store
    from bridge_client.errors import BadRequest

    store = Store(str(tmp_path / "store.sqlite"))
    try:
        log: List[Any] = []

        def append(kind: str, step: Any, attempt: int, fields: Dict[str, Any], extra: Any) -> Any:
            log.append((kind, dict(fields), tuple(extra)))
            return len(log) - 1, None

        interaction = TurnInteraction("t-1", "s-1", AlwaysAllowed(store), lambda ticket: None)
        interaction.begin_run(approvals=True, timeout=None, cancelled=threading.Event(), append=append)
        decided: List[Any] = []
        asking = threading.Thread(
            target=lambda: decided.append(
                interaction.ask(0, 1, "c-1", "Bash", {"command": "ls"}, ("allow-once", "deny"), None)
            )
        )
        asking.start()
        wait_until(lambda: log, timeout=5)
        request_id = log[0][1]["requestId"]
        with pytest.raises(BadRequest, match="offers allow-once, deny"):
            interaction.answer(request_id, "allow-always", None, "host")
        assert len(log) == 1  # nothing recorded, nothing remembered
        assert interaction.answer(request_id, "allow-once", None, "host")["decision"] == "allow-once"
        asking.join(5)
        assert [d.decision for d in decided] == ["allow-once"]
        assert not AlwaysAllowed(store).allowed("s-1", "Bash")
    finally:
        store.close()


def test_c18_allow_always_from_the_hosts_policy_is_remembered(make_bridge):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one\necho two")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        answer = {
            "sessionId": sid,
            "turnId": tid,
            "requestId": rid,
            "decision": "allow-always",
            "by": "policy",
        }
        assert c.value("AnswerApproval", answer)["by"] == "policy"
        reader.join(20)
        assert reader.exit is not None and reader.exit["_tag"] == "Success", (reader.error, reader.parts)
        answers = [(p["decision"], p["by"]) for p in reader.parts if p["type"] == "approval-answer"]
        # the second command's request is answered by the session's remembered allow-always
        assert answers == [("allow-always", "policy"), ("allow-always", "policy")]


def test_c18_a_policy_that_raises_or_returns_junk_leaves_the_request_to_the_caller(sandbox, workspace):
    import os

    import bridge_client as bc
    from interactive_support import lines, next_request, of_type, shell_session

    out = os.path.join(workspace, "out")
    calls: List[str] = []

    def policy(request: Any) -> Any:
        calls.append(request.request_id)
        if len(calls) == 1:
            raise ValueError("the policy broke")
        return "maybe" if len(calls) == 2 else None  # junk, then: leave it to the caller

    with shell_session(sandbox, approve=policy) as session:
        turn = session.turn(f"echo one >> {out}\necho two >> {out}")
        seen: List[Any] = []
        first = next_request(turn, seen)
        with pytest.raises(ValueError, match="the policy broke"):
            next(turn)
        assert turn.pending_approvals == [first]  # still pending, the caller may answer it
        turn.approve(first)
        second = next_request(turn, seen)
        with pytest.raises(TypeError, match="approve= returned"):
            next(turn)
        assert turn.pending_approvals == [second]
        # a request of another turn (or an id this turn never had) is not found
        other = session.turn("echo other")
        with pytest.raises(bc.ApprovalNotFound):
            other.approve(second)
        turn.deny(second)
        seen.extend(turn)
        assert calls == [first.request_id, second.request_id]
        other.cancel()  # its request (if it came) is left to the caller: denied by the cancel
        list(other)
    assert lines(out) == ["one"]
    assert [a.decision for a in of_type(seen, bc.ApprovalAnswer)] == ["allow-once", "deny"]


def test_c18_an_answer_racing_a_cancel_records_one_answer(make_bridge):
    bridge = make_bridge(driver="shell")
    for _ in range(3):
        with bridge.connect() as c, bridge.connect() as c2:
            sid, tid, reader = _start(bridge, c, "echo one")
            wait_until(reader.requests, timeout=15)
            rid = reader.requests()[0]["requestId"]
            go = threading.Barrier(2)
            exits: List[Any] = []

            def cancel(sid: str = sid, tid: str = tid, go: Any = go) -> None:
                go.wait()
                c2.value("CancelTurn", {"sessionId": sid, "turnId": tid})

            canceller = threading.Thread(target=cancel)
            canceller.start()
            go.wait()
            exits.append(
                c.call(
                    "AnswerApproval",
                    {"sessionId": sid, "turnId": tid, "requestId": rid, "decision": "allow-once"},
                )
            )
            canceller.join(10)
            reader.join(20)
            assert reader.exit is not None and reader.exit["_tag"] == "Success", reader.error
            answers = [p for p in reader.parts if p["type"] == "approval-answer"]
            assert len(answers) == 1
            if exits[0]["_tag"] == "Success":
                assert answers[0]["by"] == "host"
            else:
                assert _tag(exits[0]["cause"]) == "ApprovalExpired" and answers[0]["by"] == "cancel"
    assert "Traceback" not in bridge.log()


def test_c18_messages_racing_the_turns_end_never_follow_turn_finish(make_bridge):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        stop = threading.Event()
        outcomes: Dict[str, str] = {}

        def send() -> None:
            with bridge.connect() as conn:
                n = 0
                while not stop.is_set() and n < 400:
                    mid = f"m-{n}"
                    exit_ = conn.call(
                        "SendMessage", {"sessionId": sid, "turnId": tid, "messageId": mid, "text": "true"}
                    )
                    outcomes[mid] = "ok" if exit_["_tag"] == "Success" else _tag(exit_["cause"])
                    if outcomes[mid] == "TurnNotRunning":
                        return
                    n += 1

        sender = threading.Thread(target=send)
        sender.start()
        c.value(
            "AnswerApproval", {"sessionId": sid, "turnId": tid, "requestId": rid, "decision": "allow-once"}
        )
        time.sleep(0.2)
        c.value("CancelTurn", {"sessionId": sid, "turnId": tid})
        reader.join(30)
        stop.set()
        sender.join(30)
        assert reader.exit is not None and reader.exit["_tag"] == "Success", reader.error
        types = [p["type"] for p in reader.parts]
        assert types[-1] == "turn-finish"
        logged = [p["messageId"] for p in reader.parts if p["type"] == "user-message"]
        assert set(logged) == {m for m, o in outcomes.items() if o == "ok"}
        assert set(outcomes.values()) <= {"ok", "TurnNotRunning"}
    assert "Traceback" not in bridge.log()


def test_c18_a_message_at_the_size_limit_is_kept_whole_and_one_over_is_refused(sandbox):
    import bridge_client as bc
    from interactive_support import next_request, of_type, shell_session

    big = "\U0001f600" * (1024 * 1024 // 4)  # 1 MiB of UTF-8, 3 MiB as JSON escapes
    with shell_session(sandbox) as session:
        turn = session.turn("echo one")
        seen: List[Any] = []
        next_request(turn, seen)
        with pytest.raises(bc.BadRequest):
            turn.say(big + "x")
        with pytest.raises(bc.BadRequest):
            turn.say("\ud800")
        mid = turn.say(big)
        assert turn.say(big, message_id=mid) == mid  # idempotent
        with pytest.raises(bc.BadRequest):
            turn.say("other", message_id=mid)
        turn.cancel()
        seen.extend(turn)
    (message,) = of_type(seen, bc.UserMessage)
    assert message.message_id == mid and message.text == big


def test_c18_a_message_to_a_turn_a_restart_left_unfinished_is_kept_and_handed(make_bridge, tmp_path):
    out = tmp_path / "ran"
    prompt = "echo one"
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, prompt)
        wait_until(lambda: reader.requests(), timeout=15)
        bridge.kill()
    reader.join(10)
    bridge.start()
    with bridge.connect() as c:
        sent = c.value(
            "SendMessage", {"sessionId": sid, "turnId": tid, "messageId": "m-1", "text": f"echo msg >> {out}"}
        )
        c.value("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt})
        reader = _Reader(bridge, sid, tid)
        reader.start()
        answered = set()
        deadline = time.monotonic() + 30
        while reader.is_alive() and time.monotonic() < deadline:
            for r in reader.requests():
                if r["requestId"] not in answered:
                    answered.add(r["requestId"])
                    c.call(
                        "AnswerApproval",
                        {
                            "sessionId": sid,
                            "turnId": tid,
                            "requestId": r["requestId"],
                            "decision": "allow-once",
                        },
                    )
            time.sleep(0.05)
        reader.join(5)
        assert reader.exit is not None and reader.exit["_tag"] == "Success", reader.error
    messages = [p for p in reader.parts if p["type"] == "user-message"]
    assert [(m["messageId"], m["index"]) for m in messages] == [("m-1", sent["index"])]
    assert out.read_text().splitlines() == ["msg"]
    assert "Traceback" not in bridge.log()


def test_b08_an_empty_message_from_a_peer_is_refused_and_nothing_is_recorded(make_bridge):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        sid, tid, reader = _start(bridge, c, "echo one")
        wait_until(lambda: reader.requests(), timeout=15)
        rid = reader.requests()[0]["requestId"]
        mbase = {"sessionId": sid, "turnId": tid}
        for i, text in enumerate(["", " ", "\n\t ", "\u3000"]):
            payload = {**mbase, "messageId": f"m-empty-{i}", "text": text}
            assert _tag(c.causes("SendMessage", payload)) == "BadRequest", repr(text)
        # the connection goes on, and a message with text is taken
        sent = c.value("SendMessage", {**mbase, "messageId": "m-ok", "text": "echo two"})
        assert sent["messageId"] == "m-ok"
        c.value("AnswerApproval", {**mbase, "requestId": rid, "decision": "deny"})
        c.value("CancelTurn", {"sessionId": sid, "turnId": tid})
        reader.join(20)
        assert reader.exit is not None
        logged = [p["messageId"] for p in reader.parts if p["type"] == "user-message"]
        assert logged == ["m-ok"], "no empty message is in the log"
    assert "Traceback" not in bridge.log()
