"""The worker: one attempt of one run, in its own process.

``python -m akka_optimize.jobs.worker SPEC.json`` reads the job spec and calls the
function its kind declared (``spec.worker``; for a supervised run
:func:`akka_optimize.jobs.training.train`, which prepares the rows, trains with the engine
and uploads each save), streaming every event to the service. Event delivery retries for
``service.workerRetrySeconds`` (300 s by default), following the address the service
publishes in the blob store, so the worker survives a service restart, even at another
address (seeds/001 "Other changes"; :mod:`akka_optimize.jobs.address`). The service's answer to each event may ask the worker to pause or
cancel; the worker then saves and stops at the next update boundary.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..store import BlobStore
from ..worker_events import EventClient as EventClient
from ..worker_events import ServiceUnreachable as ServiceUnreachable
from ..worker_events import failure_sentence
from .address import UNREACHABLE_EXIT, record_gave_up
from .spec import JobSpec


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


class RankEvents:
    """The events of a rank other than 0 on a run on several devices: only rank 0 talks to
    the service, so these are dropped; pause and cancel reach this rank from rank 0 through
    the engine (:func:`akka_optimize.engine.distributed.any_rank`)."""

    control: str | None = None
    unreachable = False

    def send(self, event: dict[str, Any]) -> None:
        """Drop ``event`` (rank 0 sends the run's events)."""

    def post(self, route: str, body: dict[str, Any], timeout: float = 600.0) -> httpx.Response:
        """Refused: only rank 0 calls the service.

        Raises:
            RuntimeError: always."""
        raise RuntimeError(f"rank {rank_of_process()} does not call the service ({route})")


def rank_of_process() -> int:
    """This worker's rank under ``torch.distributed.run`` (``RANK``); 0 when run alone."""
    return int(os.environ.get("RANK", "0") or 0)


def run(spec: JobSpec) -> int:
    """Run one attempt; returns the process exit code. On a run on several devices each
    rank runs this; only rank 0 sends events (the others get :class:`RankEvents`), except
    the ``failed`` event of a rank that fails itself (:func:`_rank_failed`); each other rank
    has its own scratch folder."""
    store = BlobStore(spec.blobs_url)
    rank = rank_of_process()
    events: Any = EventClient(spec, store) if rank == 0 else RankEvents()
    work = Path(spec.extra.get("work_dir") or f"/tmp/akka-worker-{spec.run_id}-{spec.attempt}")
    if rank:
        work = work.with_name(f"{work.name}-rank{rank}")
    work.mkdir(parents=True, exist_ok=True)
    try:
        outcome = entry_point(spec.worker)(spec, store, events, work)
    except BaseException as exc:  # every failure ends as an event with a sentence
        detail = traceback.format_exc()
        print(detail, file=sys.stderr, flush=True)
        if rank:  # torch.distributed.run ends the other ranks
            return _rank_failed(spec, store, rank, exc, detail)
        if isinstance(exc, ServiceUnreachable):
            return _gave_up(spec, store, events)
        try:
            events.send(
                {"type": "failed", "reason": failure_sentence(exc), "detail": detail[-20000:]}
            )
        except ServiceUnreachable as gone:
            print(f"worker: {gone}", file=sys.stderr, flush=True)
            return _gave_up(spec, store, events)
        return 1
    finally:
        # Every save was uploaded to the store as it was made and a resume downloads from
        # there, so the attempt's local states and adapters are only copies.
        shutil.rmtree(work, ignore_errors=True)
    if rank:
        return 0
    try:
        events.send(outcome)
    except ServiceUnreachable as gone:
        print(f"worker: {gone}", file=sys.stderr, flush=True)
        return _gave_up(spec, store, events)
    return 0


RANK_RETRY_S = 30.0
"""How long a failing rank other than 0 retries the service with its failure."""


def _rank_failed(
    spec: JobSpec, store: BlobStore, rank: int, exc: BaseException, detail: str
) -> int:
    """A rank other than 0 failed: it sends a ``failed`` event marked with its rank, its
    sentence naming the rank. The service keeps it without ending the attempt: rank 0's
    own failure ends it (its sentence wins unless it is a generic one, such as a broken
    collective: :func:`akka_optimize.jobs.events.rank_reason`), or the reaper does,
    with the rank's sentence, when the workers exit without a final event. A service it
    cannot reach within :data:`RANK_RETRY_S` leaves the sentence in its log. Returns the
    exit code, 1."""
    world = os.environ.get("WORLD_SIZE", "?")
    reason = f"Rank {rank} of {world}: {failure_sentence(exc)}"
    events = EventClient(spec, store)
    events.retry_s = min(events.retry_s, RANK_RETRY_S)
    try:
        events.send({"type": "failed", "rank": rank, "reason": reason, "detail": detail[-20000:]})
    except ServiceUnreachable as gone:
        print(f"worker rank {rank}: {gone}", file=sys.stderr, flush=True)
    return 1


def _gave_up(spec: JobSpec, store: BlobStore, events: EventClient) -> int:
    """Record in the store that the attempt gave up on the service (the service that comes
    back reads it: it cannot read the exit code of a worker it did not launch)."""
    record_gave_up(store, spec.run_id, spec.attempt, events.retry_s)
    return UNREACHABLE_EXIT


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m akka_optimize.jobs.worker SPEC.json``."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m akka_optimize.jobs.worker SPEC.json", file=sys.stderr)
        sys.exit(2)
    spec = JobSpec.read(Path(args[0]))
    print(json.dumps({"run": spec.run_id, "attempt": spec.attempt}), flush=True)
    code = run(spec)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a rank of torch.distributed.run
        from ..engine.distributed import exit_rank  # lazy: guarded

        exit_rank(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
