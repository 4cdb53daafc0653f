"""The turn's life in the bridge as one table (STYLE.md rule 2): every move the runner makes
is in it, an illegal move raises and leaves the state unchanged, and each state reports the
status the RPCs answer with."""
from __future__ import annotations

import pytest

from bridge_client.bridge import turn_life
from bridge_client.bridge.turn_life import IllegalTurnMove, TurnLife
from bridge_client.bridge.turn_log import Turn
from bridge_client.wire.parts import SessionState


def test_a_turns_life_from_new_to_finished_and_through_the_cancel_grace():
    life = TurnLife("new")
    assert life.status == "running"
    assert life.move("launch") == "running" and life.status == "running"
    assert life.move("end") == "finished" and life.status == "finished" and not life.forced

    life = TurnLife("running")
    life.move("force")
    assert (life.state, life.status, life.forced) == ("forcing", "running", True)
    life.move("forced")
    assert (life.state, life.status, life.forced) == ("forced", "finished", True)

    life = TurnLife("orphan")
    life.move("launch")
    life.move("leave")
    assert life.status == "orphan"
    life.move("cancel")
    assert life.status == "finished"


@pytest.mark.parametrize(
    "state, event",
    [("finished", "launch"), ("running", "launch"), ("new", "end"), ("forced", "end"), ("forcing", "leave"),
     ("orphan", "force"), ("finished", "cancel")],
)
def test_an_illegal_move_raises_and_leaves_the_state_unchanged(state, event):
    life = TurnLife(state)
    with pytest.raises(IllegalTurnMove, match=f"{state} cannot {event}"):
        life.move(event)
    assert life.state == state


def test_every_state_is_reachable_and_reports_a_wire_status():
    targets = {nxt for nxt in turn_life.MOVES.values()} | {"new", "orphan"}
    assert targets == set(turn_life.STATUS)
    assert set(turn_life.STATUS.values()) == {"running", "orphan", "finished"}
    with pytest.raises(IllegalTurnMove):
        TurnLife("cancelled")


def test_a_turns_status_is_its_lifes():
    turn = Turn("t", "s", "p", SessionState("s", 0, None), "orphan")
    assert (turn.status, turn.forced) == ("orphan", False)
    turn.life.move("launch")
    turn.life.move("force")
    assert (turn.status, turn.forced) == ("running", True)


def test_c09_a_turn_whose_finish_is_committed_is_reported_finished_before_its_thread_ends():
    # A reader may read turn-finish before the turn's thread makes the "end" move; a StartTurn
    # sent again (or a CancelTurn) in that window must not answer "running" (seen in CI).
    turn = Turn("t", "s", "p", SessionState("s", 0, None), "running")
    turn.publish_segment(['{"type":"text-delta"}'], [(0, 1, "text-delta")], [])
    assert turn.reported_status == "running"
    finish = (None, 1, "turn-finish")
    turn.publish_segment(['{"type":"turn-finish"}'], [finish], [finish])
    assert turn.status == "running" and turn.reported_status == "finished"
    turn.life.move("end")
    assert turn.reported_status == "finished"
