"""The host's side of C18 without a bridge: what an ``approve=`` policy may return, which
requests count as pending as parts are yielded, and bad arguments refused before anything is
sent."""
from __future__ import annotations

import pytest

import bridge_client as bc
from bridge_client.client.interactive import RecordedAnswer, TurnApprovals, answer, policy_decision
from bridge_client.wire.parts import ApprovalAnswer, ApprovalRequest, StepReset, TurnFinish


def _request(rid: str, step: int = 0, attempt: int = 1) -> ApprovalRequest:
    choices = ("allow-once", "deny")
    return ApprovalRequest(1, step, attempt, rid, "c", "shell", {"command": "ls"}, choices, None)


@pytest.mark.parametrize(
    "returned, decided",
    [
        (True, ("allow-once", None)),
        (False, ("deny", None)),
        (None, None),
        ("allow-always", ("allow-always", None)),
        (("deny", "why"), ("deny", "why")),
        ((True, "ok"), ("allow-once", "ok")),
        (RecordedAnswer("r", "deny", "m", "host"), ("deny", "m")),
    ],
)
def test_c18_what_a_policy_may_return(returned, decided):
    assert policy_decision(returned) == decided


@pytest.mark.parametrize("returned", ["yes", 1, ("maybe", None), ("deny", 3), object()])
def test_c18_a_policy_returning_no_decision_is_a_type_error(returned):
    with pytest.raises(TypeError):
        policy_decision(returned)


def test_c18_pending_requests_follow_the_parts_yielded():
    seen = TurnApprovals(policy=None)
    a, b, c = _request("a"), _request("b"), _request("c", step=1)
    for part in (a, b, c, a):  # accounting a part twice changes nothing
        seen.seen(part)
    assert list(seen.pending) == ["a", "b", "c"]
    seen.seen(ApprovalAnswer(5, 0, 1, "a", "allow-once", None, "host"))
    assert list(seen.pending) == ["b", "c"]
    seen.seen(StepReset(6, 0, 1, 1, "bridge restarted", ("c",)))  # step 0 attempt 1: b expires
    assert list(seen.pending) == ["c"]
    seen.seen(TurnFinish(7, None, 1, "stop", None, None))
    assert seen.pending == {}


def test_c18_the_policy_is_due_once_per_request():
    seen = TurnApprovals(policy=lambda request: True)
    a = _request("a")
    seen.seen(a)
    seen.seen(a)
    assert seen.due == [a]


class _NoBridge:
    """A turn whose session must never be asked to send anything."""

    id = "t1"
    _session_id = "s1"
    _link = None

    class _session:  # noqa: N801 - stands in for the Session object
        @staticmethod
        def _call(*args, **kwargs):
            raise AssertionError("nothing may be sent for a bad argument")


@pytest.mark.parametrize(
    "request_, decision, message, error",
    [
        (3, "deny", None, TypeError),
        ("r1", "maybe", None, ValueError),
        ("r1", "deny", 5, TypeError),
        ("../r1", "deny", None, bc.BadRequest),
    ],
)
def test_c18_bad_answers_are_refused_before_sending(request_, decision, message, error):
    with pytest.raises(error):
        answer(_NoBridge(), request_, decision, message)  # type: ignore[arg-type]
