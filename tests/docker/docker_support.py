"""Names and helpers shared by the Docker sandbox tests and their fixtures."""
from __future__ import annotations

import os
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE_TAG = "bookworm-1"
BASE_IMAGE = f"bridge-client-test-base:{IMAGE_TAG}"
NOPYTHON_IMAGE = f"bridge-client-test-nopython:{IMAGE_TAG}"
TEST_LABEL = "io.bridge-client.test"
ENGINE_WAIT = 30.0  # seconds for a dockerd started here to answer


def remove_container(client: Any, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except Exception:  # already gone
        pass
