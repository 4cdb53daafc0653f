"""A driver that cannot offer host tools, under an agent id of its own (the ``echo`` driver):
``plain_driver:make_driver``."""
from __future__ import annotations

from typing import Any

from bridge_client.drivers.echo import EchoDriver, make_driver as echo_driver


class PlainDriver(EchoDriver):
    """The echo driver, as the agent ``my-echo``."""

    agent_id = "my-echo"


def make_driver(options: Any) -> PlainDriver:
    """A :class:`PlainDriver` (``options`` as the echo driver takes them)."""
    echo_driver(options)  # checks them
    return PlainDriver(options)
