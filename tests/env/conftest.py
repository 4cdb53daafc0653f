"""Fixtures of the session-environment tests: the shared ones (home, workspace, sandbox) come
from the root conftest; this folder's helpers are put on the import path."""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
