"""Logging (issue 6, item 4): everything goes through logging.getLogger("bridge_client"),
which has only a NullHandler; one DEBUG line each for connect, launch, resend, resume,
restart and idle close; nothing is printed."""
from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)

LOGGER = "bridge_client"


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.DEBUG]


def _count(messages, fragment):
    return sum(fragment in m for m in messages)


def test_the_library_adds_only_a_null_handler_and_configures_nothing_else():
    logger = logging.getLogger(LOGGER)
    assert [type(h) for h in logger.handlers] == [logging.NullHandler]
    assert logger.level == logging.NOTSET and logger.propagate


def test_connect_launch_and_idle_close_each_log_one_debug_line(sandbox, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.3)) as session:
        list(session.turn("hello"))
        assert wait_until(lambda: not session.connected, timeout=10)
        messages = _messages(caplog)
        assert _count(messages, "launching bridge") == 1, messages
        assert _count(messages, "connected to ws://") == 1, messages
        assert _count(messages, "closing connection") == 1 and _count(messages, "idle for") == 1, messages
    out = capsys.readouterr()
    assert out.out == "" and out.err == "", "the library prints nothing"


def test_resume_and_restart_each_log_one_debug_line(sandbox, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    opts = options("echo", agent_options={"steps": 4, "delay": 0.05})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("again")
        for _ in range(3):
            next(turn)
        os.kill(session._hello.pid, signal.SIGKILL)  # the bridge dies mid-turn
        assert list(turn)[-1].type == "turn-finish"
        messages = _messages(caplog)
        assert _count(messages, "resuming") == 1, messages
        assert _count(messages, "bridge restarted, starting the turn again") == 1, messages
        assert _count(messages, "launching bridge") == 2, messages


def test_resend_logs_one_debug_line(sandbox, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    quick = session_options(sandbox, request_timeout=1.0, ping_interval=5.0, ping_timeout=5.0)
    with bc.create_session(options("echo"), quick) as session:
        list(session.turn("first"))
        pid = session._hello.pid
        # A frozen bridge does not answer StartTurn: after request_timeout the connection
        # counts as lost and StartTurn is sent again (C08); the bridge wakes up meanwhile.
        os.kill(pid, signal.SIGSTOP)
        waker = threading.Timer(3.0, os.kill, (pid, signal.SIGCONT))
        waker.start()
        try:
            turn = session.turn("second")
        finally:
            waker.join(timeout=10)
            os.kill(pid, signal.SIGCONT)
        assert list(turn)[-1].type == "turn-finish"
        messages = _messages(caplog)
        assert _count(messages, "connection lost, resending") == 1, messages
        assert _count(messages, "launching bridge") == 1, "the same bridge answered the resend"
