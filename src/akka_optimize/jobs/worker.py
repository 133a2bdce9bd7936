"""The worker: one attempt of one run, in its own process.

``python -m akka_optimize.jobs.worker SPEC.json`` reads the job spec and calls the
function its kind declared (``spec.worker``; for a supervised run
:func:`akka_optimize.jobs.training.train`, which prepares the rows, trains with the engine
and uploads each save), streaming every event to the service. Event delivery retries for
up to 15 minutes, so the worker survives a service restart (seeds/001 "Other
changes"). The service's answer to each event may ask the worker to pause or
cancel; the worker then saves and stops at the next update boundary.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..errors import AkkaError
from ..store import BlobStore
from .spec import JobSpec

RETRY_FOR_S = 15 * 60


class EventClient:
    """Posts events to the service; remembers the last control request (pause/cancel)."""

    def __init__(self, spec: JobSpec) -> None:
        self.url = (
            f"{spec.callback_url}/v1/training/runs/{spec.run_id}/attempts/{spec.attempt}/events"
        )
        self.headers = {"Authorization": f"Bearer {spec.token}"}
        self.control: str | None = None

    def send(self, event: dict[str, Any]) -> None:
        """Deliver ``event``; retry on connection errors and 5xx for up to 15 minutes."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.5
        while True:
            try:
                r = httpx.post(self.url, json=event, headers=self.headers, timeout=60)
                if r.status_code < 500:
                    if r.status_code == 200:
                        self.control = (r.json() or {}).get("control")
                    elif r.status_code in (404, 409, 410):
                        self.control = "cancel"  # the run no longer accepts this attempt
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not accept events for 15 minutes")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def failure_sentence(exc: BaseException) -> str:
    """One sentence a user can act on (seeds/000 "Failure reporting")."""
    if isinstance(exc, AkkaError):
        return exc.message
    if isinstance(exc, MemoryError):
        return (
            "The run ran out of host memory; a smaller config.hyperparams.training.microBatchPerGpu "
            "or config.maxSeqLength uses less."
        )
    return f"The worker failed: {type(exc).__name__}: {exc}"


def entry_point(name: str) -> Callable[[JobSpec, BlobStore, EventClient, Path], dict[str, Any]]:
    """The function a spec's ``worker`` names (``"module:function"``, declared by the job's
    kind in :mod:`akka_optimize.jobs.kinds`); the worker knows no kind of job itself.

    Raises:
        ValueError: ``name`` is not ``module:function`` or names nothing callable.
    """
    module, _, function = name.partition(":")
    target = getattr(importlib.import_module(module), function, None) if function else None
    if not callable(target):
        raise ValueError(f"The job spec's worker {name!r} names no function (module:function).")
    return target


def run(spec: JobSpec) -> int:
    """Run one attempt; returns the process exit code."""
    events = EventClient(spec)
    store = BlobStore(spec.blobs_url)
    work = Path(spec.extra.get("work_dir") or f"/tmp/akka-worker-{spec.run_id}-{spec.attempt}")
    work.mkdir(parents=True, exist_ok=True)
    try:
        outcome = entry_point(spec.worker)(spec, store, events, work)
    except BaseException as exc:  # every failure ends as an event with a sentence
        detail = traceback.format_exc()
        print(detail, file=sys.stderr, flush=True)
        events.send({"type": "failed", "reason": failure_sentence(exc), "detail": detail[-20000:]})
        return 1
    finally:
        # Every save was uploaded to the store as it was made and a resume downloads from
        # there, so the attempt's local states and adapters are only copies.
        shutil.rmtree(work, ignore_errors=True)
    events.send(outcome)
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m akka_optimize.jobs.worker SPEC.json``."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m akka_optimize.jobs.worker SPEC.json", file=sys.stderr)
        sys.exit(2)
    spec = JobSpec.read(Path(args[0]))
    print(json.dumps({"run": spec.run_id, "attempt": spec.attempt}), flush=True)
    sys.exit(run(spec))


if __name__ == "__main__":
    main()
