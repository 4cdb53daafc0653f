"""A bounded chaos test (C08, C09, C13): two hosts run turn after turn while a chaos thread
drops their connections (reset or clean close), blackholes them, and SIGKILLs the bridge at
random. Zero lost parts, zero repeated complete steps, every turn ends with turn-finish.

It runs for ``BRIDGE_CLIENT_CHAOS_SECONDS`` (default 30) seconds; ``BRIDGE_CLIENT_CHAOS_SEED``
repeats a run (the seed is printed when it fails)."""
from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any, Dict, List

import pytest

import bridge_client as bc
from host_support import _alive, options, session_options
from resilience_support import bridge_pid, check_turn

SECONDS = float(os.environ.get("BRIDGE_CLIENT_CHAOS_SECONDS", "30"))
SEED = int(os.environ.get("BRIDGE_CLIENT_CHAOS_SEED", str(random.SystemRandom().randrange(2**32))))
STEPS = 3
CHUNKS = 4
ECHO = {"steps": STEPS, "chunks": CHUNKS, "delay": 0.01}

pytestmark = pytest.mark.timeout(SECONDS + 90)


def _kill_bridge(sandbox: Any, bridge_id: str, workspace: str) -> bool:
    """SIGKILL the bridge of the listening file, if that pid is a live process in the workspace
    (a stale file's pid may belong to another process by now)."""
    pid = bridge_pid(sandbox, bridge_id)
    if pid is None or not _alive(pid):
        return False
    try:
        if os.readlink(f"/proc/{pid}/cwd") != os.path.realpath(workspace):
            return False
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def test_c08_c09_c13_chaos_many_turns_under_drops_and_bridge_kills(proxied, sandbox, workspace):
    rng = random.Random(SEED)
    opts = options("echo", agent_options=ECHO)
    so = session_options(
        proxied, resend_window=20.0, launch_timeout=20.0, ping_interval=0.2, ping_timeout=0.4
    )
    stop = threading.Event()
    failures: List[str] = []
    counts: Dict[str, int] = dict.fromkeys("turns parts resets drops kills blackholes rereads".split(), 0)
    lock = threading.Lock()
    bridge: List[str] = []

    def host(number: int) -> None:
        record: List[Any] = []
        rng_host = random.Random(SEED + number + 1)
        try:
            with bc.create_session(opts, so) as session:
                bridge[:] = [session.bridge_id]
                turns = 0
                while not stop.is_set():
                    prompt = f"host {number} turn {turns} says hello "
                    turn = session.turn(prompt, turn_id=f"h{number}-t{turns}")
                    parts = list(turn)
                    check_turn(parts, steps=STEPS)
                    assert turn.text() == prompt * STEPS, (turn.text(), prompt)
                    deltas = [p for p in parts if isinstance(p, bc.TextDelta)]
                    final = {p.step: p.attempt for p in parts if isinstance(p, bc.StepFinish)}
                    kept = [d for d in deltas if final.get(d.step) == d.attempt]
                    assert len(kept) == STEPS * CHUNKS, "no text delta of a kept attempt lost"
                    turns += 1
                    record.append((turn.state, parts))
                    with lock:
                        counts["turns"] += 1
                        counts["parts"] += len(parts)
                        counts["resets"] += sum(isinstance(p, bc.StepReset) for p in parts)
                # Once the chaos is over, read some turns again, undisturbed, from the bridge's
                # log: every part it keeps was delivered under the chaos, and what the chaos run
                # got beyond those belongs to attempts that a step-reset discarded.
                for state, parts in rng_host.sample(record, min(12, len(record))):
                    clean = list(session.continue_turn(state))
                    got = {p.index: p for p in parts}
                    missing = [p.index for p in clean if p.index not in got]
                    assert not missing, f"parts lost under the chaos: {missing}"
                    discarded = {(r.step, r.discarded_attempt) for r in clean if isinstance(r, bc.StepReset)}
                    kept = {p.index for p in clean}
                    extra = [p for i, p in got.items() if i not in kept]
                    assert all((p.step, p.attempt) in discarded for p in extra), f"stray parts: {extra}"
                    with lock:
                        counts["rereads"] += 1
        except BaseException as exc:  # reported by the main thread
            import traceback

            failures.append(f"host {number}: {traceback.format_exc()}")
            stop.set()
            raise SystemExit from exc

    hosts = [threading.Thread(target=host, args=(n,), name=f"chaos-host-{n}", daemon=True) for n in range(2)]
    for thread in hosts:
        thread.start()
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline and not stop.is_set():
            stop.wait(rng.uniform(0.2, 0.9))
            if not bridge:
                continue
            action = rng.random()
            if action < 0.45:
                counts["drops"] += proxied.drop_all(rst=rng.random() < 0.5)
            elif action < 0.55:
                proxies = proxied.all()
                if proxies:
                    proxies[-1].blackhole(existing=True, new=False)
                    counts["blackholes"] += 1
            elif action < 0.80:
                counts["kills"] += _kill_bridge(sandbox, bridge[0], workspace)
            # else: a quiet spell
    finally:
        stop.set()
        for thread in hosts:
            thread.join(60)
    assert not failures, f"seed {SEED}: " + "\n".join(failures)
    assert not any(t.is_alive() for t in hosts), f"seed {SEED}: a host did not finish its turn"
    print(f"chaos seed {SEED}: {counts}")
    assert counts["turns"] >= 4 and counts["rereads"] >= 4, counts
    assert counts["kills"] >= 1 and counts["drops"] >= 1, f"seed {SEED}: too little chaos: {counts}"
