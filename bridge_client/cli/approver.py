"""``bridge-client run --approve ask|all|none``: the agent asks before it runs a tool.

Approvals are off unless ``--approve`` is given, so scripts written before behave as they did.
With ``--approve``:

- ``ask``: on a terminal (standard input is one, and the output is not ``--json``) each
  request is a question, ``Allow Bash: rm -rf build? [y]es/[n]o/[a]lways``, read from the
  terminal; end of input or Ctrl-C at the question answers no. The question is put by a
  thread of its own while the turn is read on, so an answer given elsewhere (or by the
  approval timeout) withdraws it at once, saying who answered. Elsewhere (``--json``, a pipe)
  the request is printed and the run keeps reading while another shell answers it with
  ``bridge-client answer``.
- ``all`` allows every request, ``none`` denies every one (for scripts).

The run writes the turn's state at turn start (to ``--state FILE``, else to the state file a
suspend writes), which ``bridge-client answer`` and ``bridge-client say`` take. See the
*Command line* guide (``cli``) and the *Interactive turns* guide (``interactive``).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from typing import Any, Callable, Dict, Optional, Set, TextIO

from ..errors import ApprovalConflict, ApprovalExpired, ApprovalNotFound, TurnNotRunning
from ..wire.parts import ApprovalAnswer, ApprovalRequest, Part
from ..terminal import is_terminal
from .output import print_err
from .question import TerminalQuestions
from .sandboxes import sandbox_label
from .turn_state import save_turn_state, state_record

__all__ = ["Approver", "write_file", "begin"]


# ----------------------------------------------------------------------------- answering


class Approver:
    """Answers the requests a ``run`` reads, as ``--approve`` says.

    Args:
        mode: ``ask``, ``all`` or ``none``.
        turn: the :class:`~bridge_client.client.turn.Turn` being read (its ``approve`` and
            ``deny`` send the answers).
        ask: whether ``ask`` may put questions (a terminal on ``tty_in``, not ``--json``).
        tty_in, tty_out: where the question is read and written (standard input, standard
            error).
        note: prints one line for the person (standard error).
        hint: what to print at each request that is not asked at the terminal (how to answer
            it from another shell; ``{id}`` is replaced by the request id), or ``None``.
        terminal: holds the terminal while a question is written (the spinner's
            ``Progress.output``), or ``None``.
        answer: sends an answer on behalf of a policy, called as ``answer(turn, request,
            decision, message, by="policy")`` (:func:`bridge_client.client.interactive.answer`
            when ``None``): ``all`` and ``none`` answer as a policy, a question's answer as the
            host (``turn.approve``, ``turn.deny``).

    :meth:`seen` is called with every part before it is shown, :meth:`on_part` after. With
    ``ask``, the questions are put by a thread of their own
    (:class:`~bridge_client.cli.question.TerminalQuestions`) while the turn is read on, so an
    answer given elsewhere withdraws the question at once. A request whose answer fails because
    it was answered elsewhere first, or expired meanwhile, is said and the run goes on.
    """

    def __init__(
        self,
        mode: str,
        turn: Any,
        *,
        ask: bool,
        tty_in: Optional[TextIO],
        tty_out: Optional[TextIO],
        note: Any,
        hint: Optional[str] = None,
        terminal: Optional[Callable[[], Any]] = None,
        answer: Optional[Callable[..., Any]] = None,
    ) -> None:
        if answer is None:
            from ..client.interactive import answer as answer_as
        else:
            answer_as = answer
        self._answer_as_policy: Callable[..., Any] = answer_as
        self.mode = mode
        self.turn = turn
        self.ask = ask
        self.tty_in = tty_in
        self.tty_out = tty_out
        self.note = note
        self.hint = hint
        self._answered: Set[str] = set()  # request ids seen answered in the log
        self._tools: Dict[str, str] = {}  # request id -> tool name, of the requests seen
        # Tools allowed always in this turn: the session remembers that, and the bridge answers
        # their next requests itself (allow-always, by policy) right after announcing them.
        self._always: Set[str] = set()
        self.questions: Optional[TerminalQuestions] = None
        if ask:
            self.questions = TerminalQuestions(self._send, tty_in, tty_out, terminal=terminal)

    def seen(self, part: Part) -> None:
        """Call before ``part`` is shown: a question it settles (answered elsewhere, by the
        approval timeout, its step restarted, the turn finished) is withdrawn, saying so."""
        if self.questions is not None:
            self.questions.seen(part)

    def interrupt(self) -> bool:
        """Ctrl-C (from the signal handler): True when it answered the open question no,
        False when no question is open."""
        return self.questions is not None and self.questions.interrupt()

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the questions asked so far are answered or
        withdrawn; True if so (at once when nothing is asked)."""
        return self.questions is None or self.questions.settle(timeout)

    def close(self) -> None:
        """Stop asking (the turn ended or is suspended). Idempotent."""
        if self.questions is not None:
            self.questions.close()

    def on_part(self, part: Part) -> None:
        """Answer ``part`` when it is a request nobody has answered yet; else nothing."""
        if isinstance(part, ApprovalAnswer):
            self._answered.add(part.request_id)
            if part.decision == "allow-always" and part.request_id in self._tools:
                self._always.add(self._tools[part.request_id])
            return
        if not isinstance(part, ApprovalRequest) or part.request_id in self._answered:
            return
        self._tools[part.request_id] = part.tool_name
        if part.tool_name in self._always or not self._still_pending(part):
            return
        if self.mode == "all":
            self._send(part, "allow-once", None, by="policy")
        elif self.mode == "none":
            self._send(part, "deny", "denied by --approve none", by="policy")
        elif self.questions is not None:
            self.questions.ask(part)
        elif self.hint is not None:
            self.note(self.hint.replace("{id}", shlex.quote(part.request_id)))

    def _still_pending(self, request: ApprovalRequest) -> bool:
        """False when ``request`` is answered already: by a part yielded before, or by one
        received and not yet yielded (a turn read again from its start); True when unsure."""
        pending = getattr(self.turn, "pending_approvals", None)
        if pending is not None and all(r.request_id != request.request_id for r in pending):
            return False
        if getattr(self.turn, "_st", None) is not None:  # a real Turn: look at what it received
            from ..client.interactive import _answered_ahead

            return not _answered_ahead(self.turn, request)
        return True

    def _send(
        self, request: ApprovalRequest, decision: str, message: Optional[str], by: str = "host"
    ) -> None:
        try:
            if by != "host":
                self._answer_as_policy(self.turn, request, decision, message, by=by)
            elif decision == "deny":
                self.turn.deny(request, message=message)
            else:
                self.turn.approve(request, always=decision == "allow-always")
        except ApprovalConflict as exc:
            recorded = getattr(exc, "recorded", None)
            first = getattr(recorded, "decision", None) or (
                recorded.get("decision") if isinstance(recorded, dict) else None
            )
            self.note(
                f"bridge-client: request {request.request_id} was answered elsewhere first ({first or exc})"
            )
        except (ApprovalExpired, ApprovalNotFound, TurnNotRunning) as exc:
            self.note(f"bridge-client: request {request.request_id} cannot be answered any more: {exc}")
        self._answered.add(request.request_id)  # its answer part (next) marks an allow-always


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (a file the user named, such as ``--state``) atomically with
    mode 0600: a temporary file in the same folder, then a rename over the target, so a reader
    sees the old file or the new one and a symlink at ``path`` is replaced, not followed.

    Raises:
        OSError: the folder cannot be written.
    """
    fd, tmp = tempfile.mkstemp(prefix=".bridge-client-", dir=os.path.dirname(path) or ".")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def begin(
    args: argparse.Namespace, turn: Any, terminal: Optional[Callable[[], Any]] = None
) -> Optional[Approver]:
    """Set up a ``run`` or ``continue`` for its requests and messages, at turn start.

    ``run`` writes the turn state to ``--state FILE`` when given, else (approvals on) to the
    file a suspend writes; ``continue`` has its state file already. With ``--approve ask``,
    one line on standard error names that file and how to answer from another shell.

    Args:
        args: the command line. turn: the turn being read. terminal: holds the terminal while
            a question is written (the spinner's ``Progress.output``), or ``None``.

    Returns:
        The :class:`Approver` to call with each part, or ``None`` with approvals off.
    """
    mode = getattr(args, "approve", None)
    path: Optional[str] = getattr(args, "turn_state_file", None)
    wanted = getattr(args, "state", None)
    if "turn_state_file" not in args and wanted:
        record = state_record(turn.state, sandbox_label(args.sandbox), args.agent)
        path = os.path.abspath(wanted)
        try:
            write_file(path, json.dumps(record, ensure_ascii=False).encode())
        except OSError as exc:  # the turn runs already: keep its state where it can be found
            path = save_turn_state(turn.state, sandbox_label(args.sandbox), args.agent)
            reason = exc.strerror or str(exc)
            print_err(f"bridge-client: cannot write --state {wanted}: {reason}; the turn state is in {path}")
    elif "turn_state_file" not in args and mode is not None:
        path = save_turn_state(turn.state, sandbox_label(args.sandbox), args.agent)
    if mode is None:
        return None
    ask = mode == "ask" and not args.json and is_terminal(sys.stdin)
    hint = None
    if path is not None and mode == "ask":
        where = shlex.quote(os.path.abspath(path))
        print_err(
            f"bridge-client: turn state in {where}; from another shell, answer with "
            f"`bridge-client answer {where} REQUEST_ID allow|deny|always`, add a message with "
            f"`bridge-client say {where} TEXT`"
        )
        if not ask:
            hint = f"bridge-client: waiting for: bridge-client answer {where} {{id}} allow|deny|always"
    return Approver(
        mode, turn, ask=ask, tty_in=sys.stdin, tty_out=sys.stderr, note=print_err, hint=hint,
        terminal=terminal,
    )
