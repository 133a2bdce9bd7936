"""Free loopback ports for the servers tests start (the lowest test helper: imports nothing here)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
