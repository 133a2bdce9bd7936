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

from ..worker_events import ADDRESS_KEY as ADDRESS_KEY
from ..worker_events import current_address as current_address
from ..worker_events import publish_address as publish_address

UNREACHABLE_EXIT = 3
"""The worker's exit code when it could not reach the service within its retry window."""


def gave_up_key(run_id: str, attempt: int) -> str:
    """The blob key where attempt ``attempt`` of ``run_id`` records that it gave up."""
    return f"runs/{run_id}/attempts/{attempt}/unreachable.json"


def record_gave_up(store: Any, run_id: str, attempt: int, seconds: float) -> None:
    """Record, before the worker exits ``UNREACHABLE_EXIT``, that it gave up after
    ``seconds`` of retries. A service that comes back did not launch the worker, so it
    cannot read the exit code: it reads this instead (:func:`gave_up_after`). A store that
    cannot be written loses only the sentence (the run still fails as a worker gone)."""
    try:
        store.put_bytes(gave_up_key(run_id, attempt), json.dumps({"seconds": seconds}).encode())
    except Exception:
        pass


def gave_up_after(store: Any, run_id: str, attempt: int) -> float | None:
    """The retry window (seconds) attempt ``attempt`` of ``run_id`` recorded when it gave
    up on the service (:func:`record_gave_up`), or None when it recorded nothing."""
    try:
        seconds = json.loads(store.get_bytes(gave_up_key(run_id, attempt))).get("seconds")
    except Exception:
        return None
    return float(seconds) if isinstance(seconds, int | float) else None


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
