"""Where the service is: its address, published in the blob store (issue 14 item 8).

A worker is told the service's address in its job spec, but the service may come back
at another one mid-run (a new port, a new host). Each service publishes its address at
start under ``ADDRESS_KEY`` of the blob store the workers share with it; a worker that
cannot reach the address it has reads the key and switches to the published one. A
worker that reaches no service for ``service.workerRetrySeconds`` of the deployment
file (300 s by default) ends its attempt with exit code ``UNREACHABLE_EXIT``; the
service that comes back fails the run with a sentence and frees the device.
"""

from __future__ import annotations

import json
from typing import Any

ADDRESS_KEY = "service/address.json"
UNREACHABLE_EXIT = 3
"""The worker's exit code when it could not reach the service within its retry window."""


def publish_address(store: Any, url: str) -> None:
    """Record ``url`` (``http://host:port``) as the service's current address."""
    store.put_bytes(ADDRESS_KEY, json.dumps({"url": url}).encode())


def current_address(store: Any) -> str | None:
    """The address the last service to start published, or None when there is none
    (or the store cannot be read just now)."""
    try:
        url = json.loads(store.get_bytes(ADDRESS_KEY)).get("url")
    except Exception:
        return None
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def unreachable_sentence(seconds: float | None = None) -> str:
    """The failure reason of a run whose worker gave up on the service."""
    window = (
        f"{seconds:g} s (service.workerRetrySeconds)"
        if seconds
        else ("its retry window (service.workerRetrySeconds)")
    )
    return (
        f"The worker could not reach the service for {window} "
        "and ended its attempt; resume the run with "
        "`training runs resume`."
    )
