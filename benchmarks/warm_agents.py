"""The ``warm-agent`` rows: a real agent CLI's text-only turn through the bridge, on the warm
agent process its driver keeps for a session (Claude Code's and Qwen Code's stream-json
process, pi's RPC process, an ACP agent's process), against the same CLI run directly
with its usual one-shot command, both against the scripted model server of the agent tests
(``tests/agents/model_server.py``, on 127.0.0.1), in the same run. One row per CLI found in the
agent tests' cache (``~/.cache/bridge-client``: run ``pytest tests/agents`` once to fill it).

- The product: turns 2 to ``runs + 1`` of one session (the first turn starts the agent and is
  reported apart, as the first-turn figure in the row's detail), ``turn()`` to the
  turn's finish part, in milliseconds.
- The baseline: ``runs`` one-shot runs of the CLI (``claude -p``, ``qwen -p``, ``pi -p``,
  ``opencode run``, ``copilot -p``), each in the same private HOME, process start to exit,
  after one warm-up run (a fresh HOME's state set-up).

The ratio is direct / warm (above 1: the bridge is faster); the target is a warm turn at most a
quarter of the direct run (ratio >= 4).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import bridge_client as bc

from ._common import BenchEnv, Row, Sizes, figure, time_ratio

__all__ = ["warm_agents", "CLIS"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT_TESTS = os.path.join(ROOT, "tests", "agents")
KEY = "sk-bridge-client-benchmark-0123456789abcdef"  # long: Copilot masks the key's value
PROMPT = "Say hello."


def _cached(lock_dir: str, files: Tuple[str, ...], cache: str, program: str) -> Optional[str]:
    """The installed ``program`` of the agent tests' npm lock in ``lock_dir`` (cached under
    ``~/.cache/bridge-client/<cache>/<digest of files>``, as the tests install it), or ``None``."""
    import hashlib

    h = hashlib.sha256()
    for name in files:
        try:
            with open(os.path.join(lock_dir, name), "rb") as f:
                h.update(f.read())
        except OSError:
            return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "bridge-client", cache, h.hexdigest()[:16], "node_modules", ".bin", program)
    return path if os.access(path, os.X_OK) else None


Setup = Tuple[List[str], Dict[str, str], Dict[str, Any]]


def _stream_cli(driver: str, argv: List[str]) -> Callable[[Any, str, str], Setup]:
    """A CLI set up as the agent tests set it up (``tests/agents/cli_setups.py``: its settings
    under the private HOME and its variables, which reach the bridge's CLI through the
    session's environment), run one-shot with ``argv``."""

    def make(program: str, model: Any, home: str) -> Setup:
        from cli_setups import SETUPS  # tests/agents is on sys.path (see _one_cli)

        variables: Dict[str, str] = {}
        opts = SETUPS[driver](model, home, variables.__setitem__)
        return list(argv), variables, opts

    return make


def _acp(driver: str, argv: List[str], key_env: str, **extra: Any) -> Callable[[Any, str, str], Setup]:
    """An ACP preset pointed at the model server as its driver points it (its ``base_url``
    options), run one-shot with ``argv``."""

    def make(program: str, model: Any, home: str) -> Setup:
        from bridge_client.drivers import copilot, opencode

        opts = {"base_url": f"{model.url}/v1", "model": "fake-model", **extra}
        module = {"opencode": opencode, "copilot": copilot}[driver]
        env = module.make_driver({"executable": program, **opts}).preset_env
        return list(argv), {**env, key_env: KEY}, opts

    return make


_MAIN = ("", ("package-lock.json",), "agents")  # the agent tests' main npm lock
_PI = ["-p", "--mode", "json", "--provider", "test", "--model", "test-model", PROMPT]
_COPILOT = ["-p", PROMPT, "--allow-all-tools", "--output-format", "json", "--no-auto-update"]

CLIS: Dict[str, Tuple[str, Tuple[str, ...], str, str, Callable[[Any, str, str], Setup]]] = {
    "claude-code": (*_MAIN, "claude", _stream_cli("claude-code", ["-p", PROMPT, "--output-format", "json"])),
    "qwen": (*_MAIN, "qwen", _stream_cli("qwen", ["-p", PROMPT, "--output-format", "json"])),
    "pi": (*_MAIN, "pi", _stream_cli("pi", _PI)),
    "opencode": (*_MAIN, "opencode", _acp("opencode", ["run", "--format", "json", PROMPT], "FAKE_KEY",
                                          api_key_env="FAKE_KEY")),
    "copilot": ("npm-more", ("package.json", "package-lock.json"), "agents-more", "copilot",
                _acp("copilot", _COPILOT, "COPILOT_PROVIDER_API_KEY")),
}
"""driver → (its npm lock's folder under tests/agents, the files its cache digest is of, its
cache folder, its program, how to run it: ``(one-shot arguments, variables, driver options)``
for the program, the model server and the private HOME)."""


def _home_env(home: str) -> Dict[str, str]:
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
        "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
    }


def _direct(program: str, argv: List[str], env: Dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([program, *argv], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace")[-300:]
        raise RuntimeError(f"{program} exited {done.returncode}: {tail}")
    return took * 1000


def _one_cli(env: BenchEnv, driver: str, program: str, runs: int) -> Row:
    if AGENT_TESTS not in sys.path:
        sys.path.insert(0, AGENT_TESTS)  # the scripted model server and the CLIs' set-ups
    from model_server import ModelServer, text

    make = CLIS[driver][-1]
    with ModelServer() as model:
        home = tempfile.mkdtemp(prefix=f"warm-{driver}-", dir=env.root)
        argv, variables, opts = make(program, model, home)
        workspace = env.workspace(f"warm-{driver}")
        homes = _home_env(home)
        model.script(text("Hello."))
        _direct(program, argv, {**variables, **homes}, workspace)  # a fresh HOME's state set-up
        direct = []
        for _ in range(runs):
            model.script(text("Hello."))
            direct.append(_direct(program, argv, {**variables, **homes}, workspace))
        agent = {**opts, "executable": program}
        if driver in ("opencode", "copilot"):
            agent["permission"] = "allow"
        options = bc.bridge_options(driver, agent_options=agent)
        session_env = {**homes, **variables}
        where = bc.Workspace(bc.LocalSandbox(workspace))
        warm: List[float] = []
        first = 0.0
        with bc.create_session(options, bc.CreateSessionOptions(workspace=where, env=session_env)) as s:
            for i in range(runs + 1):
                model.script(text("Hello."))
                t0 = time.perf_counter()
                turn = s.turn(PROMPT)
                parts = list(turn)
                took = (time.perf_counter() - t0) * 1000
                if parts[-1].finish_reason != "stop" or "Hello." not in turn.text():
                    raise RuntimeError(f"the {driver} turn ended {parts[-1].finish_reason} "
                                       f"({parts[-1].error}) saying {turn.text()!r}")
                if i == 0:
                    first = took
                else:
                    warm.append(took)
        env.stop_bridges(workspace)
    product = figure(f"{driver}: a warm turn through the bridge (turn to finish)", "ms", warm)
    baseline = figure(f"{driver}: the CLI's one-shot run, direct ({' '.join(argv[:1])} ...)", "ms", direct)
    ratio = time_ratio(product, baseline)
    return Row(
        f"warm-agent {driver}",
        product,
        baseline,
        ratio,
        "direct / warm (> 1: the bridge is faster)",
        "a warm turn <= 1/4 of the direct run (ratio >= 4)",
        ratio >= 4,
        extra={"first_turn_ms": round(first, 1)},
    )


def warm_agents(env: BenchEnv, sizes: Sizes) -> List[Row]:
    """One row per ACP agent CLI in the agent tests' cache (see the module docstring)."""
    runs = max(1, min(sizes.turns // 12, 5))  # 5 in a full run, 1 at the smoke test's tiny size
    rows = []
    for driver, (lock, files, cache, program, _make) in CLIS.items():
        found = _cached(os.path.join(AGENT_TESTS, lock), files, cache, program)
        if found is None:
            rows.append(Row(f"warm-agent {driver}", None, skipped=(
                f"skipped: {program} is not in the agent tests' cache (run pytest tests/agents once)")))
            continue
        try:
            rows.append(_one_cli(env, driver, found, runs))
        except Exception as exc:  # one CLI's failure must not lose the others' rows
            failed = f"failed: {type(exc).__name__}: {exc}"[:300]
            rows.append(Row(f"warm-agent {driver}", None, skipped=failed))
    return rows
