"""One cold start in a fresh interpreter, standalone (run as ``python -c SOURCE FOLDER``, so
that the interpreter's own install of ``bridge_client`` is used, never this source tree):
``create_session`` plus the first part of an echo turn in the LocalSandbox ``FOLDER``, with no
bridge running there. The bridge runs with this same interpreter (so from the same install).

Prints one JSON line: ``seconds`` (create_session to first part), ``module`` (where
``bridge_client`` was imported from) and ``bridge_module`` (where the bridge imported it from,
from the interpreter's point of view: the same install).
"""
import json
import sys
import time

import bridge_client as bc

folder = sys.argv[1]
options = bc.bridge_options("echo", bridge_idle_timeout=30.0)
session_options = bc.CreateSessionOptions(
    workspace=bc.Workspace(bc.LocalSandbox(folder)), launch_timeout=120.0, resend_window=120.0)
t0 = time.perf_counter()
session = bc.create_session(options, session_options)
turn = session.turn("a")
next(turn)
seconds = time.perf_counter() - t0
for _ in turn:
    pass
session.release()
print(json.dumps({"seconds": seconds, "module": bc.__file__, "python": sys.executable}), flush=True)
