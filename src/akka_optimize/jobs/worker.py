"""The worker: one attempt of one run, in its own process.

``python -m akka_optimize.jobs.worker SPEC.json`` reads the job spec, prepares
the rows (PREPARING), trains with the engine (RUNNING), uploads each save to the
blob store and streams every event to the service. Event delivery retries for
up to 15 minutes, so the worker survives a service restart (seeds/001 "Other
changes"). The service's answer to each event may ask the worker to pause or
cancel; the worker then saves and stops at the next update boundary.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
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


def upload_dir(store: BlobStore, local: Path, prefix: str) -> int:
    """Copy every file under ``local`` to ``prefix`` in the store; returns bytes written."""
    total = 0
    for p in sorted(local.rglob("*")):
        if p.is_file():
            store.put_file(f"{prefix}/{p.relative_to(local).as_posix()}", p)
            total += p.stat().st_size
    return total


def download_prefix(store: BlobStore, prefix: str, dest: Path) -> Path:
    """Materialise every blob under ``prefix`` into ``dest``."""
    for key in store.list(prefix):
        out = dest / key[len(prefix) :].lstrip("/")
        out.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(key, out)
    return dest


def first_system_message(rows: list[dict[str, Any]]) -> str | None:
    """The model's training instructions: the first system message of its training data."""
    for row in rows:
        for m in row.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "system":
                c = m.get("content")
                if isinstance(c, list):
                    c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
                return c if isinstance(c, str) and c else None
    return None


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


def run(spec: JobSpec) -> int:
    """Run one attempt; returns the process exit code."""
    events = EventClient(spec)
    store = BlobStore(spec.blobs_url)
    work = Path(spec.extra.get("work_dir") or f"/tmp/akka-worker-{spec.run_id}-{spec.attempt}")
    work.mkdir(parents=True, exist_ok=True)
    try:
        from . import training

        outcome = training.train(spec, store, events, work)
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
