"""``bridge-client run --approve ask|all|none``: the agent asks before it runs a tool.

Approvals are off unless ``--approve`` is given, so scripts written before behave as they did.
With ``--approve``:

- ``ask``: on a terminal (standard input is one, and the output is not ``--json``) each
  request is a question, ``Allow Bash: rm -rf build? [y]es/[n]o/[a]lways``, read from the
  terminal; end of input or Ctrl-C at the question answers no. Elsewhere (``--json``, a pipe)
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
import signal
import sys
import tempfile
import threading
from typing import Any, Dict, Optional, Set, TextIO, Tuple

from ..errors import ApprovalConflict, ApprovalExpired, ApprovalNotFound, TurnNotRunning
from ..wire.parts import ApprovalAnswer, ApprovalRequest, Part
from ..terminal import is_terminal
from .approval_text import keys, parse_answer, question
from .output import print_err
from .sandboxes import sandbox_label
from .turn_state import save_turn_state, state_record

__all__ = ["Approver", "write_file", "begin"]


# ----------------------------------------------------------------------------- answering


class _AtPrompt(Exception):
    """Ctrl-C at the question: the answer is no."""


def _at_prompt(signum: int, frame: Any) -> None:
    raise _AtPrompt


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

    :meth:`on_part` is called with every part after it is shown. A request whose answer fails
    because it was answered elsewhere first, or expired meanwhile, is said and the run goes on.
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
    ) -> None:
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
            self._send(part, "allow-once", None)
        elif self.mode == "none":
            self._send(part, "deny", "denied by --approve none")
        elif self.ask:
            try:
                decision, message = self._ask(part)
            except _AtPrompt:  # Ctrl-C just as the question ended: no, all the same
                decision, message = "deny", "denied at the terminal (Ctrl-C)"
            self._send(part, decision, message)
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

    def _ask(self, request: ApprovalRequest) -> Tuple[str, Optional[str]]:
        """Put the question until it gets an answer; end of input or Ctrl-C is no."""
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, _at_prompt) if main else None
        try:
            return self._read_answer(request)
        except _AtPrompt:
            self._say("no (Ctrl-C)")
            return "deny", "denied at the terminal (Ctrl-C)"
        finally:
            while main:  # a Ctrl-C here still lands in _at_prompt: put the handler back anyway
                try:
                    signal.signal(signal.SIGINT, previous)
                    break
                except _AtPrompt:
                    continue

    def _read_answer(self, request: ApprovalRequest) -> Tuple[str, Optional[str]]:
        while True:
            self._say(question(request), end="")
            line = self.tty_in.readline() if self.tty_in is not None else ""
            if not line:
                self._say("no (end of input)")
                return "deny", "denied at the terminal (end of input)"
            decision = parse_answer(line, request.choices)
            if decision is not None:
                return decision, None
            self._say("please answer " + keys(request.choices).replace("[", "").replace("]", ""))

    def _say(self, text: str, end: str = "\n") -> None:
        if self.tty_out is not None:
            self.tty_out.write(text + end)
            self.tty_out.flush()

    def _send(self, request: ApprovalRequest, decision: str, message: Optional[str]) -> None:
        try:
            if decision == "deny":
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


def begin(args: argparse.Namespace, turn: Any) -> Optional[Approver]:
    """Set up a ``run`` or ``continue`` for its requests and messages, at turn start.

    ``run`` writes the turn state to ``--state FILE`` when given, else (approvals on) to the
    file a suspend writes; ``continue`` has its state file already. With ``--approve ask``,
    one line on standard error names that file and how to answer from another shell.

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
    return Approver(mode, turn, ask=ask, tty_in=sys.stdin, tty_out=sys.stderr, note=print_err, hint=hint)
