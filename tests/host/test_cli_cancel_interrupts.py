"""``bridge-client cancel``: a Ctrl-C at each step from the cancel's request to the session's
release says what is known of the cancel.

The real command's function with the turn it reaches replaced, so the interrupt lands exactly
at one step (a real SIGINT lands where the scheduler puts it: the end-to-end test in
test_cli_bad_input.py). Under load the real one landed between two narrower handlers, and
the command printed only "interrupted"."""
from __future__ import annotations

import argparse
import contextlib
import threading
import types

import pytest

from bridge_client.cli import cancel as cancel_cmd


class _Turn:
    """A turn whose step ``at`` raises KeyboardInterrupt."""

    id = "turn-7"

    def __init__(self, at: str) -> None:
        self.at = at
        self.finish = types.SimpleNamespace(finish_reason="cancelled")

    def _step(self, name: str) -> None:
        if self.at == name:
            raise KeyboardInterrupt

    def cancel(self):
        self._step("cancel")
        return types.SimpleNamespace(status="running")

    def suspend(self) -> None:
        pass

    def __iter__(self):
        self._step("read")
        yield object()
        self._step("read-end")


def _run(monkeypatch, capsys, at: str):
    turn = _Turn(at)

    @contextlib.contextmanager
    def reach_turn(args, absent=""):
        turn._step("open")
        yield turn
        turn._step("release")

    monkeypatch.setattr(cancel_cmd, "reach_turn", reach_turn)
    start = threading.Timer.start

    def timer_start(timer):
        turn._step("timer")
        start(timer)

    monkeypatch.setattr(threading.Timer, "start", timer_start)
    args = argparse.Namespace(timeout=5.0, turn_state_file="saved turn.json")
    code = cancel_cmd._cmd_cancel(args)
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


@pytest.mark.parametrize("at", ["timer", "read", "read-end"])
def test_cli_ctrl_c_after_the_cancel_was_answered_says_it_was_sent(monkeypatch, capsys, at):
    code, out, err = _run(monkeypatch, capsys, at)
    assert code == 130 and out == ""
    assert err == "bridge-client: interrupted; the cancel of turn turn-7 was sent, its end not seen"


def test_cli_ctrl_c_while_the_cancel_waits_for_its_answer_says_to_run_it_again(monkeypatch, capsys):
    code, out, err = _run(monkeypatch, capsys, "cancel")
    assert code == 130 and out == ""
    assert err == (
        "bridge-client: interrupted; the cancel of turn turn-7 may not have reached the bridge: "
        "run `bridge-client cancel 'saved turn.json'` again"
    )


def test_cli_ctrl_c_while_the_session_is_released_says_how_the_turn_finished(monkeypatch, capsys):
    code, out, err = _run(monkeypatch, capsys, "release")
    assert code == 130 and out == ""
    assert err == "bridge-client: interrupted; turn turn-7 had finished (cancelled)"


def test_cli_ctrl_c_before_anything_was_asked_is_a_plain_interrupt(monkeypatch, capsys):
    with pytest.raises(KeyboardInterrupt):
        _run(monkeypatch, capsys, "open")


def test_cli_cancel_without_an_interrupt_says_the_turn_was_cancelled(monkeypatch, capsys):
    code, out, err = _run(monkeypatch, capsys, "")
    assert (code, out, err) == (0, "cancelled turn turn-7", "")
