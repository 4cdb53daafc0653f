"""A bridge server in the test's own process, on a real port: a store, a turn manager over a
driver, the server's accept loop in a thread; closed in that order's reverse on exit."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Tuple

from bridge_client.bridge.server import BridgeServer, IdleWatcher
from bridge_client.bridge.store import Store
from bridge_client.bridge.turns import TurnManager
from bridge_client.redacted import Redacted

TOKEN = "tok"


@contextmanager
def serving(store_path: str, driver: Any, **server_options: Any) -> Iterator[Tuple[TurnManager, int]]:
    """Yield ``(manager, port)`` of a running server (token ``TOKEN``) over ``driver``;
    ``server_options`` go to :class:`BridgeServer` (``send_timeout=``, say)."""
    store = Store(store_path)
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    server = BridgeServer(
        manager, token=Redacted(TOKEN), hello={}, idle=IdleWatcher(60, lambda: None), **server_options
    )
    port = server.start()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield manager, port
    finally:
        server.shutdown()
        thread.join(5)
        manager.close()
        store.close()
