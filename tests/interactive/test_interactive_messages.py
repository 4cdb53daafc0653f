"""User messages to a running turn (C18): idempotent by message id, recorded in order as
``user-message`` parts, taken by the shell driver as further commands; a finished turn takes
none; a driver that cannot take messages refuses them."""
from __future__ import annotations

import os

import pytest

import bridge_client as bc
from host_support import options, session_options
from interactive_support import lines, of_type, shell_session

pytestmark = pytest.mark.timeout(90)


def test_c18_messages_are_idempotent_and_in_order(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox, approve=lambda request: True) as session:
        turn = session.turn(f"echo prompt >> {out}")
        seen = []
        # The policy answers the first request once it was yielded; the turn waits till then.
        seen.append(next(turn))  # turn-start
        while not isinstance(seen[-1], bc.ApprovalRequest):
            seen.append(next(turn))
        assert turn.say(f"echo a >> {out}", message_id="m1") == "m1"
        assert turn.say(f"echo b >> {out}", message_id="m2") == "m2"
        assert turn.say(f"echo a >> {out}", message_id="m1") == "m1"  # again: nothing added
        with pytest.raises(bc.BadRequest):
            turn.say("echo other", message_id="m1")  # the same id with another text
        generated = turn.say(f"echo c >> {out}")
        assert generated not in ("m1", "m2")
        seen.extend(turn)
        with pytest.raises(bc.TurnNotRunning):
            turn.say("echo late")
        assert turn.say(f"echo a >> {out}", message_id="m1") == "m1"  # a resend after the end
    messages = of_type(seen, bc.UserMessage)
    assert [m.message_id for m in messages] == ["m1", "m2", generated]
    assert [m.step for m in messages] == [None, None, None]
    indexes = [m.index for m in messages]
    assert indexes == sorted(indexes)
    assert lines(out) == ["prompt", "a", "b", "c"]


def test_c18_a_driver_that_cannot_take_messages_refuses_them(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        turn = session.turn("hello")
        list(turn)
        with pytest.raises(bc.MessagesUnsupported):
            turn.say("more")


def test_c18_a_message_reaches_a_turn_without_approvals(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox, approvals=False) as session:
        # The first command waits for a file the test makes after sending the message.
        flag = os.path.join(workspace, "go")
        turn = session.turn(f"while [ ! -e {flag} ]; do sleep 0.05; done; echo prompt >> {out}")
        seen = [next(turn)]
        turn.say(f"echo steered >> {out}")
        open(flag, "w").close()
        seen.extend(turn)
    assert lines(out) == ["prompt", "steered"]
    assert not of_type(seen, bc.ApprovalRequest)


def test_c18_turn_say_refuses_an_empty_message_before_sending_it(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox, approve=lambda request: True) as session:
        turn = session.turn(f"echo prompt >> {out}")
        seen = [next(turn)]
        while not isinstance(seen[-1], bc.ApprovalRequest):
            seen.append(next(turn))
        for empty in ("", "   ", "\n"):
            with pytest.raises(bc.BadRequest, match="empty"):
                turn.say(empty)
            with pytest.raises(bc.BadRequest, match="empty"):
                turn.say(empty, message_id="m-empty")
        seen.extend(turn)
    assert not of_type(seen, bc.UserMessage), "nothing was stored"
    assert lines(out) == ["prompt"]
