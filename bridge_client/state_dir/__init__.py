"""The state directory: what the host and the bridge agree on about the folder a bridge lives
in, below both of them (the host and the bridge import it; it imports neither).

- :mod:`.identity`: the bridge id, the folder's layout (``<state root>/bridges/<bridge id>``)
  and the names and formats of its files (``launch.json``, ``listening.json``, ``token``, the
  lock, the store, the log), and the atomic, private writes both sides make there.
- :mod:`.unwritable`: a state directory that takes no more writes (a full disk, a quota, a
  read-only file system), and how the bridge program tells its launcher so (its exit status
  and the notice line).

Importing this package is cheap: no server code, no wire code until a file is parsed.
"""

from typing import List

__all__: List[str] = []
