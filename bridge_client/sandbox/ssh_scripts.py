"""The shell programs the SSH sandbox runs on the remote machine, and how it reads their
output: a command leads its own process group and prints it first; a detached start prints
its pid and records the exit status in a file; variables travel on standard input."""
from __future__ import annotations

import re
import shlex
from typing import Any, List, Mapping, Optional

__all__ = ["EXEC_WRAPPER", "SPAWN_WRAPPER", "SPAWN_INNER", "CWD_MARK", "NOT_FOUND_MARK",
           "env_script", "leading_pid", "drain"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
CWD_MARK = b"bridge-client: no such folder: "
NOT_FOUND_MARK = b": not found\n"

# Run as ``exec sh -c WRAPPER sh CWD ARGV...``: sshd made the login shell a session and group
# leader, and exec keeps that pid, so the group is $$ and a timeout kills the whole tree.
# Variables come on stdin as shell assignments (never in argv, where ps would show them).
EXEC_WRAPPER = (
    'eval "$(cat)" || exit 125; '
    'cd -- "$1" 2>/dev/null || { printf "bridge-client: no such folder: %s\\n" "$1" >&2; exit 126; }; '
    'shift; command -v -- "$1" >/dev/null 2>&1 || { printf "%s: not found\\n" "$1" >&2; exit 127; }; '
    'echo "$$"; "$@" </dev/null'
)
# Run as ``exec sh -c WRAPPER sh INNER CWD LOG STATUS ARGV...``: starts INNER detached (its own
# session when setsid exists, else its own process group and SIGHUP ignored) and prints its
# pid. INNER runs argv with output appended to LOG and writes argv's exit status to STATUS.
SPAWN_WRAPPER = (
    'eval "$(cat)" || exit 125; inner=$1; '
    'cd -- "$2" 2>/dev/null || { printf "bridge-client: no such folder: %s\\n" "$2" >&2; exit 126; }; '
    'log=$3; st=$4; shift 4; '
    'if [ "$log" != /dev/null ] && { [ -L "$log" ] || { [ -e "$log" ] && [ ! -f "$log" ]; }; }; then '
    'printf "bridge-client: the log %s is a symlink or not a regular file\\n" "$log" >&2; exit 125; fi; '
    '(umask 077; mkdir -p -- "${log%/*}" "${st%/*}" && : >>"$log") || exit 125; '
    'if ! command -v -- "$1" >/dev/null 2>&1; then printf "%s: not found\\n" "$1" >>"$log"; '
    'printf "%s: not found\\n" "$1" >&2; exit 127; fi; '
    'if command -v setsid >/dev/null 2>&1; '
    'then setsid sh -c "$inner" sh "$log" "$st" "$@" </dev/null >/dev/null 2>&1 & '
    'else set -m; nohup sh -c "$inner" sh "$log" "$st" "$@" </dev/null >/dev/null 2>&1 & fi; echo "$!"'
)
SPAWN_INNER = (
    'log=$1; st=$2; shift 2; "$@" >>"$log" 2>&1 </dev/null; '
    'echo "$?" >"$st.tmp" && mv -f "$st.tmp" "$st"'
)


def env_script(env: Optional[Mapping[str, str]]) -> bytes:
    """``export NAME=VALUE`` lines for the wrappers' standard input.

    Raises:
        ValueError: a name is not a shell name, or a value holds a NUL byte.
    """
    lines = []
    for key, value in (env or {}).items():
        if not _NAME.match(key):
            raise ValueError(f"not an environment variable name: {key!r}")
        if "\0" in value:
            raise ValueError(f"environment variable {key} holds a NUL byte")
        lines.append(f"export {key}={shlex.quote(value)}\n")
    return "".join(lines).encode()



def drain(recv: Any, into: List[bytes]) -> None:
    """Append what ``recv(n)`` gives to ``into`` until it ends or fails."""
    try:
        while True:
            data = recv(65536)
            if not data:
                return
            into.append(data)
    except Exception:  # the channel closed or timed out: the main reader decides what it means
        return


def leading_pid(out: bytes) -> Optional[int]:
    """The pid a wrapper printed on the first line of ``out``, if any."""
    end = out.find(b"\n")
    if end <= 0:
        return None
    try:
        return int(out[:end])
    except ValueError:
        return None
