"""Approvals and messages at the command line (issue 13, item 4; rule C18): ``run --approve
ask|all|none``, the terminal question, ``--json`` requests answered by ``bridge-client answer``
from a second process, ``bridge-client say``, and the errors of both. Approvals stay off
unless ``--approve`` is given (item 6).

The first tests check the question and the answering against a fake turn; the others run
real CLI processes against real bridges with the shell driver, which asks before each
command when approvals are on, on a real pseudo-terminal where a terminal is needed."""
from __future__ import annotations

import io
import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from bridge_client import cli
from bridge_client.cli.approval_text import parse_answer, question, shorten
from bridge_client.cli.approver import Approver
from bridge_client.cli.output import Printer
from bridge_client.errors import ApprovalConflict
from bridge_client.wire.parts import Part

pytestmark = pytest.mark.timeout(120)


def _request(request_id="t.0.1.1", tool="Bash", input=None, title=None,
             choices=("allow-once", "allow-always", "deny")):
    return Part.from_dict({
        "type": "approval-request", "index": 3, "step": 0, "attempt": 1,
        "requestId": request_id, "toolCallId": "call-1", "toolName": tool,
        "input": {"command": "rm -rf build"} if input is None else input,
        "choices": list(choices), "title": title,
    })


# ------------------------------------------------------------------------------ the question


def test_c18_the_question_names_the_tool_and_its_input_or_the_agents_title():
    assert question(_request()) == "Allow Bash: rm -rf build? [y]es/[n]o/[a]lways "
    assert question(_request(title="Edit src/app.py")) == "Allow Edit src/app.py? [y]es/[n]o/[a]lways "
    shown = question(_request(tool="Write", input={"file_path": "a.txt", "content": "x" * 500}))
    assert shown.startswith("Allow Write: a.txt?")
    other = question(_request(tool="fetch", input={"a": 1, "b": [2]}))
    assert other.startswith('Allow fetch: {"a": 1, "b": [2]}?')


def test_c18_the_question_offers_only_the_choices_the_agent_offers():
    assert question(_request(choices=("allow-once", "deny"))).endswith("? [y]es/[n]o ")
    assert parse_answer("a", ("allow-once", "deny")) is None, "no always when it is not offered"
    assert parse_answer(" Always\n", ("allow-once", "allow-always", "deny")) == "allow-always"
    assert parse_answer("YES", ("allow-once", "deny")) == "allow-once"
    assert parse_answer("n", ("allow-once",)) == "deny", "no is always possible"
    assert parse_answer("", ("allow-once", "deny")) is None
    assert parse_answer("sure", ("allow-once", "deny")) is None


def test_c18_a_request_cannot_hide_what_it_runs_in_the_question():
    sneaky = "rm -rf ~\r\x1b[2Kecho harmless\n\u202etxt.exe"
    shown = question(_request(input={"command": sneaky}))
    assert "\r" not in shown and "\x1b" not in shown and "\n" not in shown and "\u202e" not in shown
    assert "rm -rf ~\\r\\x1b[2Kecho harmless\\n\\u202etxt.exe" in shown
    long = shorten("x" * 1000)
    assert len(long) < 200 and long.endswith("more)")


def _answer(request_id, decision, by):
    return Part.from_dict({"type": "approval-answer", "index": 4, "step": 0, "attempt": 1,
                           "requestId": request_id, "decision": decision, "message": None, "by": by})


class _FakeTurn:
    """Records the answers an Approver sends; fails with ``fail`` when given."""

    def __init__(self, fail=None):
        self.sent = []
        self.fail = fail
        self.pending_approvals = []

    def approve(self, request, always=False):
        self.sent.append(("allow-always" if always else "allow-once", request.request_id, None))
        if self.fail:
            raise self.fail

    def deny(self, request, message=None):
        self.sent.append(("deny", request.request_id, message))
        if self.fail:
            raise self.fail

    def answer_as(self, turn, request, decision, message=None, by="host"):
        """What ``--approve all|none`` sends: an answer by ``policy``."""
        assert turn is self and by == "policy", (turn, by)
        self.sent.append((decision, request.request_id, message))
        if self.fail:
            raise self.fail


_APPROVERS: list = []


@pytest.fixture(autouse=True)
def _close_approvers():
    """Each test's approvers are closed after it, so that no question thread outlives it."""
    yield
    while _APPROVERS:
        _APPROVERS.pop().close()


def _approver(mode, typed="", fail=None, ask=True):
    turn, out, notes = _FakeTurn(fail), io.StringIO(), []
    approver = Approver(mode, turn, ask=ask, tty_in=io.StringIO(typed), tty_out=out, note=notes.append,
                        hint="answer {id} elsewhere", answer=turn.answer_as)
    _APPROVERS.append(approver)
    return approver, turn, out, notes


def _feed(approver, turn, request):
    turn.pending_approvals = [request]
    approver.seen(request)
    approver.on_part(request)
    assert approver.settle(10.0), "the question is answered"  # asked in a thread of its own
    turn.pending_approvals = []


def test_c18_ask_asks_again_until_it_understands_and_end_of_input_is_no():
    approver, turn, out, _ = _approver("ask", "maybe\ny\n")
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [("allow-once", "r1", None)]
    shown = out.getvalue()
    assert shown.count("Allow Bash: rm -rf build?") == 2 and "please answer yes/no/always" in shown
    _feed(approver, turn, _request("r2"))  # nothing more typed: end of input
    assert turn.sent[-1][:2] == ("deny", "r2") and "no (end of input)" in out.getvalue()


def test_c18_a_request_already_answered_in_the_log_is_not_asked_again():
    approver, turn, out, _ = _approver("ask", "y\n")
    turn.pending_approvals = []  # a continued turn: its answer part was received already
    approver.on_part(_request("r1"))
    assert turn.sent == [] and out.getvalue() == ""


def test_c18_after_always_the_tools_next_requests_are_not_asked():
    approver, turn, out, _ = _approver("ask", "a\n")
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [("allow-always", "r1", None)]
    approver.on_part(_answer("r1", "allow-always", "host"))
    _feed(approver, turn, _request("r2"))  # the bridge answers it itself (by policy)
    _feed(approver, turn, _request("r3", tool="Edit"))  # another tool: asked (end of input: no)
    assert turn.sent == [
        ("allow-always", "r1", None), ("deny", "r3", "denied at the terminal (end of input)")
    ]
    assert out.getvalue().count("Allow Bash") == 1


def test_c18_all_allows_none_denies_and_ask_off_a_terminal_says_how_to_answer():
    approver, turn, _, _ = _approver("all")
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [("allow-once", "r1", None)]
    approver, turn, _, _ = _approver("none")
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [("deny", "r1", "denied by --approve none")]
    approver, turn, out, notes = _approver("ask", "y\n", ask=False)
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [] and out.getvalue() == "" and notes == ["answer r1 elsewhere"]


def test_c18_an_answer_given_elsewhere_first_is_said_and_the_run_goes_on():
    approver, turn, _, notes = _approver("ask", "n\n", fail=ApprovalConflict("already answered"))
    _feed(approver, turn, _request("r1"))
    assert turn.sent == [("deny", "r1", None)]
    assert len(notes) == 1 and "answered elsewhere first" in notes[0]


def test_c18_the_output_shows_requests_answers_and_messages():
    printer = Printer(io.StringIO())
    printer.show(_request("r1"))
    printer.show(Part.from_dict({"type": "approval-answer", "index": 4, "step": 0, "attempt": 1,
                                 "requestId": "r1", "decision": "deny", "message": "not now", "by": "host"}))
    printer.show(Part.from_dict({"type": "user-message", "index": 5, "step": None, "attempt": 1,
                                 "messageId": "m1", "text": "also run the tests"}))
    assert printer.out.getvalue().splitlines() == [
        "[approval] Bash: rm -rf build (request r1)",
        "[denied] r1 by host: not now",
        "[message] also run the tests",
    ]


def test_c18_approvals_are_off_unless_approve_is_given():
    args = cli.build_parser().parse_args(["run", "echo hi"])
    assert args.approve is None
    args = cli.build_parser().parse_args(["run", "echo hi", "--approve", "ask"])
    assert args.approve == "ask"
    with pytest.raises(cli.UsageError):
        cli.build_parser().parse_args(["run", "echo hi", "--approve", "sometimes"])


# ------------------------------------------------------------------------------ real processes

CLI = [sys.executable, "-m", "bridge_client.cli"]


def cli_run(*args, timeout=90, input=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, input=input)


def _error_line(done, status):
    assert done.returncode == status, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error:"), done.stderr
    return lines[0]


class _Terminal:
    """A CLI process whose standard input, output and error are one pseudo-terminal."""

    def __init__(self, args, env=None):
        self.master, slave = pty.openpty()
        full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
        full_env.update({"NO_COLOR": "1"}, **(env or {}))
        self.proc = subprocess.Popen(
            [*CLI, *args], stdin=slave, stdout=slave, stderr=slave, env=full_env
        )
        os.close(slave)
        self.seen = b""

    def expect(self, text, timeout=60.0):
        """Read until ``text`` shows; return everything read so far."""
        want = text.encode()
        deadline = time.monotonic() + timeout
        while want not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} did not show; got {self.seen[-2000:]!r}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.2))
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"{text!r} did not show before the end; got {self.seen[-2000:]!r}")
                self.seen += data
        return self.seen.decode("utf-8", "replace")

    def send(self, text):
        os.write(self.master, text.encode())

    def finish(self, timeout=60.0):
        """Read to the end; return (exit status, everything shown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                self.seen += data
            elif self.proc.poll() is not None:
                break
        status = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        return status, self.seen.decode("utf-8", "replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminal():
    made = []

    def make(args, env=None):
        made.append(_Terminal(args, env))
        return made[-1]

    yield make
    for t in made:
        t.close()


def test_c18_on_a_terminal_y_runs_the_command_and_n_does_not(terminal, workspace):
    t = terminal(["run", "touch yes.txt", "touch no.txt", "echo after", "--approve", "ask",
                  "--sandbox", workspace])
    t.expect("Allow shell: touch yes.txt? [y]es/[n]o/[a]lways")
    t.send("y\n")
    t.expect("Allow shell: touch no.txt? [y]es/[n]o/[a]lways")
    assert os.path.exists(os.path.join(workspace, "yes.txt")), "allowed: it ran before the next question"
    t.send("n\n")
    t.expect("Allow shell: echo after?")
    t.send("y\n")
    status, shown = t.finish()
    assert os.path.exists(os.path.join(workspace, "yes.txt"))
    assert not os.path.exists(os.path.join(workspace, "no.txt")), "denied: it never ran"
    assert "[approval] shell: touch yes.txt (request " in shown and "[denied] " in shown
    assert "after\r\n" in shown and "[finished]" in shown
    assert "bridge-client answer " in shown, "the start says how to answer from another shell"
    assert "Traceback" not in shown, shown
    assert status in (0, 1), shown


def test_c18_on_a_terminal_always_allows_the_tool_for_the_rest_of_the_turn(terminal, workspace):
    t = terminal(["run", "touch a1.txt", "touch a2.txt", "--approve", "ask", "--sandbox", workspace])
    t.expect("Allow shell: touch a1.txt? [y]es/[n]o/[a]lways")
    t.send("a\n")
    status, shown = t.finish()
    assert status == 0, shown
    assert "Allow shell: touch a2.txt" not in shown, "the session remembers it: not asked again"
    assert "by policy" in shown
    assert all(os.path.exists(os.path.join(workspace, f"a{i}.txt")) for i in (1, 2))


def test_c18_continue_does_not_ask_about_requests_answered_in_the_log(terminal, workspace, tmp_path):
    state = str(tmp_path / "turn.json")
    done = cli_run("run", "touch d1.txt", "touch d2.txt", "--approve", "none", "--state", state,
                   "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    t = terminal(["continue", state, "--approve", "ask"])
    status, shown = t.finish()
    assert status == 0, shown
    assert shown.count("[denied] ") == 2 and "Allow shell" not in shown, shown


def test_c18_ctrl_c_and_end_of_input_at_the_question_answer_no(terminal, workspace):
    t = terminal(["run", "touch one.txt", "touch two.txt", "echo after", "--approve", "ask",
                  "--sandbox", workspace])
    t.expect("Allow shell: touch one.txt?")
    # Ctrl-C as soon as the question shows: its handler is in place before it is written.
    t.proc.send_signal(signal.SIGINT)
    t.expect("no (Ctrl-C)")
    t.expect("Allow shell: touch two.txt?")
    t.send("\x04")  # Ctrl-D: end of input
    t.expect("no (end of input)")
    t.expect("Allow shell: echo after?")
    t.send("yes\n")
    status, shown = t.finish()
    assert "after\r\n" in shown and "[finished]" in shown, shown
    assert not os.path.exists(os.path.join(workspace, "one.txt"))
    assert not os.path.exists(os.path.join(workspace, "two.txt"))
    assert "suspended" not in shown, "Ctrl-C at the question denies; it does not suspend the turn"


def test_c18_approve_all_and_none_answer_for_scripts(workspace):
    done = cli_run("run", "touch all.txt", "--approve", "all", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert os.path.exists(os.path.join(workspace, "all.txt"))
    assert "[approval] shell: touch all.txt" in done.stdout and "[allowed] " in done.stdout
    assert " by policy" in done.stdout and " by host" not in done.stdout, "a policy answers, as the log says"
    done = cli_run("run", "touch none.txt", "--approve", "none", "--sandbox", workspace, "--json")
    parts = [json.loads(line) for line in done.stdout.splitlines()]
    answers = [p for p in parts if p["type"] == "approval-answer"]
    assert [(a["decision"], a["message"], a["by"]) for a in answers] == [
        ("deny", "denied by --approve none", "policy")
    ]
    assert not os.path.exists(os.path.join(workspace, "none.txt"))
    assert done.stderr.count("bridge-client answer") == 0, "all and none never wait for another shell"


def test_c18_without_approve_nothing_asks(workspace):
    done = cli_run("run", "touch plain.txt", "--sandbox", workspace, "--json")
    assert done.returncode == 0, done.stderr
    types = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    assert "approval-request" not in types and os.path.exists(os.path.join(workspace, "plain.txt"))


class _JsonRun:
    """``run --json`` in the background, its parts read line by line (by a thread: a select
    on a buffered pipe misses lines already in its buffer)."""

    def __init__(self, args):
        self.proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.parts = []
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def until(self, type_name, count=1, timeout=60.0):
        deadline = time.monotonic() + timeout
        while sum(p["type"] == type_name for p in self.parts) < count:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {type_name} part; got {self.parts}") from None
            assert line is not None, f"the run ended before {type_name}: {self.proc.stderr.read()}"
            self.parts.append(json.loads(line))
        return [p for p in self.parts if p["type"] == type_name][count - 1]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def json_run():
    made = []

    def make(args):
        made.append(_JsonRun(args))
        return made[-1]

    yield make
    for run in made:
        run.close()


def test_c18_a_json_run_is_answered_from_a_second_process(json_run, workspace, tmp_path):
    state = str(tmp_path / "turn.json")
    run = json_run(["run", "touch a.txt", "touch b.txt", "--approve", "ask", "--json", "--state", state,
                    "--sandbox", workspace])
    first = run.until("approval-request")
    assert first["toolName"] == "shell" and first["input"]["command"] == "touch a.txt"
    assert oct(os.stat(state).st_mode & 0o777) == "0o600"
    done = cli_run("answer", state, first["requestId"], "allow")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"request {first['requestId']}: allow-once by host"
    again = cli_run("answer", state, first["requestId"], "allow")
    assert again.returncode == 0 and again.stdout == done.stdout, "the same answer twice is safe"
    line = _error_line(cli_run("answer", state, first["requestId"], "deny"), 1)
    assert "already answered (allow-once by host)" in line and "cannot be changed" in line
    # The second request, answered with only the turn-start line of the output, as a host
    # that was handed the JSON would.
    second = run.until("approval-request", 2)
    start_line = tmp_path / "start.jsonl"
    start_line.write_text(json.dumps(run.parts[0]) + "\n")
    done = cli_run("answer", str(start_line), second["requestId"], "deny", "--message", "not b",
                   "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    finish = run.until("turn-finish")
    assert run.proc.wait(timeout=30) in (0, 1)
    assert os.path.exists(os.path.join(workspace, "a.txt"))
    assert not os.path.exists(os.path.join(workspace, "b.txt"))
    answers = [p for p in run.parts if p["type"] == "approval-answer"]
    assert [(a["decision"], a["message"], a["by"]) for a in answers] == [
        ("allow-once", None, "host"), ("deny", "not b", "host")
    ]
    assert finish["type"] == "turn-finish"
    # After the turn: an unknown request, and a request of a finished turn.
    line = _error_line(cli_run("answer", state, "no-such-request", "allow"), 1)
    assert "no-such-request" in line
    line = _error_line(cli_run("answer", state, first["requestId"], "deny"), 1)
    assert first["requestId"] in line


def test_c18_say_adds_a_message_to_the_running_turn(json_run, workspace, tmp_path):
    state = str(tmp_path / "turn.json")
    run = json_run(["run", "touch first.txt", "--approve", "ask", "--json", "--state", state,
                    "--sandbox", workspace])
    request = run.until("approval-request")
    done = cli_run("say", state, "touch from-message.txt", "--id", "m-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"message m-1 sent to turn {run.parts[0]['turn']['turnId']}"
    assert cli_run("say", state, "touch from-message.txt", "--id", "m-1").returncode == 0, "same id: safe"
    message = run.until("user-message")
    assert message["text"] == "touch from-message.txt" and message["messageId"] == "m-1"
    assert cli_run("answer", state, request["requestId"], "allow").returncode == 0
    # The shell agent runs a message as a command, and asks before it too.
    asked = run.until("approval-request", 2)
    assert asked["input"]["command"] == "touch from-message.txt"
    assert cli_run("answer", state, asked["requestId"], "always").returncode == 0
    run.until("turn-finish")
    assert os.path.exists(os.path.join(workspace, "from-message.txt"))
    assert sum(p["type"] == "user-message" for p in run.parts) == 1, "one message for one id"
    line = _error_line(cli_run("say", state, "touch late.txt"), 1)
    assert "has finished" in line


MUTE = '''
class Mute:
    """Neither asks nor takes messages: waits for a cancel."""

    agent_id = "mute"

    def run_turn(self, ctx):
        ctx.start_step()
        ctx.text("waiting\\n")
        ctx.cancelled.wait(60)


def make(options):
    return Mute()
'''


def test_c18_errors_an_agent_that_cannot_ask_or_take_messages(workspace, tmp_path):
    with open(os.path.join(workspace, "mute_driver.py"), "w") as f:
        f.write(MUTE)
    line = _error_line(cli_run("run", "x", "--agent", "mute_driver:make", "--approve", "ask",
                               "--sandbox", workspace), 2)
    assert "--approve: agent 'mute_driver:make' cannot ask" in line
    assert not os.path.isdir(os.path.join(os.environ["BRIDGE_CLIENT_HOME"], "sandboxes")), \
        "refused before any bridge was launched"
    line = _error_line(cli_run("run", "x", "--agent", "pi", "--approve", "all", "--sandbox", workspace), 2)
    assert "--approve: agent 'pi' cannot ask" in line
    state = str(tmp_path / "turn.json")
    proc = subprocess.Popen([*CLI, "run", "x", "--agent", "mute_driver:make", "--state", state,
                             "--sandbox", workspace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "waiting\n"
        line = _error_line(cli_run("say", state, "hello", "--agent", "mute_driver:make"), 1)
        assert "cannot take messages" in line
        assert cli_run("cancel", state, "--agent", "mute_driver:make").returncode == 0
        assert proc.wait(timeout=30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_c18_answer_and_say_refuse_bad_input(workspace, tmp_path):
    _error_line(cli_run("answer", str(tmp_path / "nope.json"), "r1", "allow"), 2)
    _error_line(cli_run("answer", str(tmp_path / "nope.json"), "r1", "maybe"), 2)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json\n")
    assert "is not a turn state" in _error_line(cli_run("answer", str(garbage), "r1", "allow"), 2)
    done = cli_run("run", "true", "--state", str(tmp_path / "t.json"), "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert "is empty" in _error_line(cli_run("say", str(tmp_path / "t.json"), " "), 2)
    empty = cli_run("answer", str(tmp_path / "t.json"), "r1", "deny", "--message", "")
    assert "is empty" in _error_line(empty, 2)
    other = tmp_path / "other"
    other.mkdir()
    line = _error_line(cli_run("say", str(tmp_path / "t.json"), "hi", "--sandbox", str(other)), 1)
    assert "is not in" in line


def test_c18_a_run_suspended_at_a_pending_request_is_continued_and_answered(json_run, workspace, tmp_path):
    state = str(tmp_path / "turn.json")
    run = json_run(["run", "touch later.txt", "--approve", "ask", "--json", "--state", state,
                    "--sandbox", workspace])
    run.until("approval-request")
    run.proc.send_signal(signal.SIGINT)  # waiting for another shell's answer: Ctrl-C suspends
    assert run.proc.wait(timeout=30) == 130
    said = run.proc.stderr.read()
    assert "suspended" in said and "--approve ask" in said, "the continue command keeps --approve"
    assert not os.path.exists(os.path.join(workspace, "later.txt"))
    done = cli_run("continue", state, "--approve", "all")
    assert done.returncode == 0, done.stderr
    assert "[allowed] " in done.stdout and os.path.exists(os.path.join(workspace, "later.txt"))


def test_c18_a_state_file_that_cannot_be_written_is_said_and_the_state_kept(workspace, tmp_path):
    done = cli_run("run", "echo fine", "--state", str(tmp_path / "no-such-folder" / "t.json"),
                   "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert "cannot write --state" in done.stderr and "the turn state is in " in done.stderr
    kept = done.stderr.strip().rsplit("the turn state is in ", 1)[1]
    assert json.load(open(kept))["prompt"] == "echo fine"


# ------------------------------------------------------------------ a question answered elsewhere


def test_c18_a_question_answered_from_another_shell_is_withdrawn_and_the_run_goes_on(
    terminal, workspace, tmp_path
):
    state = str(tmp_path / "turn.json")
    t = terminal(["run", "touch one.txt", "touch two.txt", "--approve", "ask", "--state", state,
                  "--sandbox", workspace])
    t.expect("Allow shell: touch one.txt? [y]es/[n]o/[a]lways")
    t.send("n")  # typed, not entered: it must not answer the next question
    with open(state) as f:
        json.load(f)
    # The request id, as the other shell would read it from the printed request line.
    shown = t.expect("Allow shell: touch one.txt?")
    request_id = shown.split("[approval] shell: touch one.txt (request ", 1)[1].split(")", 1)[0]
    done = cli_run("answer", state, request_id, "allow")
    assert done.returncode == 0, done.stderr
    answered = time.monotonic()
    t.expect(f"bridge-client: request {request_id} was answered elsewhere: allow-once by host")
    noticed = time.monotonic() - answered
    t.expect("Allow shell: touch two.txt? [y]es/[n]o/[a]lways")
    assert os.path.exists(os.path.join(workspace, "one.txt")), "the answer given elsewhere is used"
    t.send("y\n")
    status, shown = t.finish()
    assert status == 0, shown
    assert os.path.exists(os.path.join(workspace, "two.txt")), "the half-typed 'n' was discarded"
    assert "Traceback" not in shown
    print(f"the question was withdrawn {noticed:.2f} s after the other shell's answer returned")


def test_c18_a_question_the_approval_timeout_answers_is_withdrawn(terminal, workspace):
    t = terminal(["run", "touch late.txt", "echo after", "--approve", "ask", "--approval-timeout", "1",
                  "--sandbox", workspace])
    t.expect("Allow shell: touch late.txt? [y]es/[n]o/[a]lways")
    t.expect("was answered by the approval timeout: deny")
    t.expect("Allow shell: echo after? [y]es/[n]o/[a]lways")
    t.send("y\n")
    status, shown = t.finish()
    assert "after\r\n" in shown and "[finished]" in shown, shown
    assert not os.path.exists(os.path.join(workspace, "late.txt"))


def test_c18_approval_timeout_must_be_a_positive_number_and_needs_approve(workspace):
    for bad in ("0", "-1", "soon", "nan", "inf"):
        line = _error_line(cli_run("run", "echo hi", "--approve", "all", "--approval-timeout", bad,
                                   "--sandbox", workspace), 2)
        assert "--approval-timeout" in line and "seconds > 0" in line, line
    line = _error_line(cli_run("run", "echo hi", "--approval-timeout", "5", "--sandbox", workspace), 2)
    assert "needs --approve" in line
    done = cli_run("run", "touch t.txt", "--approve", "ask", "--json", "--approval-timeout", "0.5",
                   "--sandbox", workspace)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    answers = [p for p in answers if p["type"] == "approval-answer"]
    assert [(a["decision"], a["by"]) for a in answers] == [("deny", "timeout")], done.stdout
    assert not os.path.exists(os.path.join(workspace, "t.txt"))


def test_c18_say_of_a_delivered_id_after_the_turn_finished_succeeds(json_run, workspace, tmp_path):
    state = str(tmp_path / "turn.json")
    run = json_run(["run", "echo first", "--approve", "ask", "--json", "--state", state,
                    "--sandbox", workspace])
    request = run.until("approval-request")
    tid = run.parts[0]["turn"]["turnId"]
    assert cli_run("say", state, "echo steered", "--id", "m-1").returncode == 0
    run.until("user-message")
    assert cli_run("answer", state, request["requestId"], "allow").returncode == 0
    asked = run.until("approval-request", 2)
    assert cli_run("answer", state, asked["requestId"], "allow").returncode == 0
    run.until("turn-finish")
    again = cli_run("say", state, "echo steered", "--id", "m-1")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"message m-1 already delivered to turn {tid} (the turn has finished)"
    line = _error_line(cli_run("say", state, "echo new", "--id", "m-2"), 1)
    assert "has finished: it takes no more messages" in line, "a new id is refused"
    line = _error_line(cli_run("say", state, "echo new"), 1)
    assert "has finished" in line
    line = _error_line(cli_run("say", state, "echo other", "--id", "m-1"), 1)
    assert "another text" in line, "the same id with another text is not the message delivered"
    assert sum(p["type"] == "user-message" for p in run.parts) == 1


def test_c18_a_question_its_step_reset_or_the_turn_finish_settles_is_withdrawn():
    from bridge_client.cli.question import TerminalQuestions

    read_end, write_end = os.pipe()
    sent, out = [], io.StringIO()
    with os.fdopen(read_end, "r") as tty_in:
        questions = TerminalQuestions(lambda r, d, m: sent.append((r.request_id, d)), tty_in, out, poll=0.02)
        try:
            questions.ask(_request("r1"))
            questions.ask(_request("r2"))
            deadline = time.monotonic() + 10
            while "Allow Bash" not in out.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            questions.seen(Part.from_dict({"type": "step-reset", "index": 5, "step": 0, "attempt": 2,
                                           "discardedAttempt": 1, "reason": "bridge restarted",
                                           "toolCallIds": []}))
            assert questions.settle(10.0)
            os.write(write_end, b"y\n")  # typed after: there is no question left to answer
            time.sleep(0.1)
            assert sent == []
            shown = out.getvalue()
            assert "bridge-client: request r1 is no longer pending: step 0 restarted" in shown, shown
            assert shown.count("Allow Bash") == 1, "r2, of the same attempt, is dropped unasked"
            questions.ask(_request("r3"))
            questions.seen(Part.from_dict({"type": "turn-finish", "index": 6, "step": None, "attempt": 2,
                                           "finishReason": "error", "error": "x", "usage": None}))
            assert questions.settle(10.0) and sent == []
        finally:
            questions.close()
            os.close(write_end)


def test_c18_an_answer_that_cannot_be_sent_is_said_and_the_question_thread_goes_on():
    from bridge_client.cli.question import TerminalQuestions
    from bridge_client.errors import BridgeUnavailable

    def send(request, decision, message):
        if request.request_id == "r1":
            raise BridgeUnavailable("no bridge answered within 10 s")
        sent.append(request.request_id)

    sent, out = [], io.StringIO()
    questions = TerminalQuestions(send, io.StringIO("y\ny\n"), out, poll=0.02)
    try:
        questions.ask(_request("r1"))
        assert questions.settle(10.0)
        questions.ask(_request("r2"))
        assert questions.settle(10.0)
    finally:
        questions.close()
    assert "the answer to request r1 was not sent: no bridge answered within 10 s" in out.getvalue()
    assert sent == ["r2"], "the thread lived on"
