"""The service side of endpoints: which worker serves which endpoint, starting them in
order, stopping idle ones, and the post-deploy check.

One worker process per resident base model: every endpoint over that base model
(the base itself or adapters of it) is served by the same worker, its adapters
attached to it (issue 8). Starts run one at a time in a queue; an endpoint's
``activity`` says its queue position or what the model is doing. A worker whose
endpoints have had no request for ``serving.idleSeconds`` stops; the endpoints
become ``STOPPED`` and the next request starts the worker again. A worker answering a
request (or running a post-deploy check) is never idle, however long the answer takes.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from ..catalog.cache import ready_model_dir
from ..db import Database
from ..db.base import intent, utcnow
from ..db.models.serving import Endpoint, EndpointModel
from ..deployment import ServingLimits
from ..forkserver import Forker
from ..registry import download_model_files, resolve
from ..settings import Settings
from ..store import BlobStore
from .check import CHECK_MAX_TOKENS, CHECK_PROMPTS, compare
from .process import Placer, WorkerProcess, run_check, start_worker

log = logging.getLogger("akka_optimize.serving")


class EndpointManager:
    """Workers of this service, keyed by pinned base-model version; a worker that can use
    no GPU, and the post-deploy check, are forked with ``forker`` (the runtime's fork
    server)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        store: BlobStore,
        limits: ServingLimits,
        forker: Forker,
    ) -> None:
        self.db, self.settings, self.store, self.limits = db, settings, store, limits
        self.forker = forker
        self.workers: dict[str, WorkerProcess] = {}
        self.loaded: dict[str, set[str]] = {}
        self.queue: list[str] = []
        self.lock = threading.RLock()
        self.start_lock = threading.Lock()
        self.stopping = threading.Event()
        self.last_used: dict[str, float] = {}
        self.in_flight: dict[str, int] = {}
        self.placement: Callable[[], tuple[Placer | None, str]] = lambda: (None, "cpu")
        """``placement()``: the cluster executor that places serving workers, or None for
        a subprocess here, and the device kind one reserves. Set by the service from the
        deployment's ``executor`` and ``serving`` sections."""
        self.admit: Callable[[str], str | None] | None = None
        """``admit(endpoint_id)``: None when the queued endpoint may start (it is then
        recorded ``STARTING``, holding its devices), else where it waits. Set by the service
        (:func:`akka_optimize.jobs.capacity.usage.endpoint_may_start`); None admits every start."""
        threading.Thread(target=self._idle_loop, daemon=True, name="endpoints-idle").start()

    # state ---------------------------------------------------------------------
    def _set(self, endpoint_id: str, **fields: Any) -> None:
        with intent(write=True), self.db.session() as s:
            ep = s.get(Endpoint, endpoint_id)
            if ep is not None:
                for k, v in fields.items():
                    setattr(ep, k, v)

    def request_start(self, endpoint_id: str) -> None:
        """Queue ``endpoint_id`` for start (returns at once)."""
        with self.lock:
            if endpoint_id in self.queue:
                return
            self.queue.append(endpoint_id)
        self._set(
            endpoint_id,
            state="QUEUED",
            activity=self.queue_line(endpoint_id),
            error=None,
            queued_at=utcnow(),
        )
        threading.Thread(target=self._start, args=(endpoint_id,), daemon=True).start()

    def queue_line(self, endpoint_id: str) -> str:
        """``queued: position N of M`` while waiting for an earlier start."""
        with self.lock:
            if endpoint_id not in self.queue:
                return ""
            return f"queued: position {self.queue.index(endpoint_id) + 1} of {len(self.queue)}"

    def worker_for(self, endpoint_id: str) -> WorkerProcess | None:
        """The running worker of an endpoint, or None. A read: a request handler calls it
        while its own writing transaction is open."""
        with intent(write=False), self.db.session() as s:
            ep = s.get(Endpoint, endpoint_id)
            base = ep.base_model if ep else None
        w = self.workers.get(base or "")
        return w if w is not None and w.alive() else None

    def touch(self, endpoint_id: str) -> None:
        """Record a request (resets the idle clock)."""
        with self.db.session() as s:
            ep = s.get(Endpoint, endpoint_id)
            if ep is not None:
                ep.last_request_at = utcnow()
                self.last_used[ep.base_model] = time.monotonic()

    def begin(self, endpoint_id: str) -> str | None:
        """A request to ``endpoint_id`` starts; its worker will not stop as idle until
        :meth:`end`. Returns the base model to pass to :meth:`end`."""
        with intent(write=False), self.db.session() as s:
            ep = s.get(Endpoint, endpoint_id)
            base = ep.base_model if ep else None
        if base is not None:
            with self.lock:
                self.in_flight[base] = self.in_flight.get(base, 0) + 1
        self.touch(endpoint_id)
        return base

    def end(self, endpoint_id: str, base: str | None) -> None:
        """The request :meth:`begin` counted has ended (answered, failed or cut off)."""
        if base is not None:
            with self.lock:
                left = self.in_flight.get(base, 0) - 1
                if left > 0:
                    self.in_flight[base] = left
                else:
                    self.in_flight.pop(base, None)
        self.touch(endpoint_id)

    # starting ------------------------------------------------------------------
    def _wait_for_devices(self, endpoint_id: str) -> bool:
        """Wait until the endpoint's claim fits its pool and its project's quota (the
        endpoint stays ``QUEUED``, its ``activity`` saying where it waits); False when it
        was deleted or the service stops meanwhile."""
        while self.admit is not None and not self.stopping.is_set():
            try:
                if self.admit(endpoint_id) is None:
                    break
            except Exception:  # the decision failed: say so on the endpoint, try again
                log.exception("endpoint %s: capacity check failed", endpoint_id)
            self.stopping.wait(0.5)
        with intent(write=False), self.db.session() as s:
            return s.get(Endpoint, endpoint_id) is not None and not self.stopping.is_set()

    def _start(self, endpoint_id: str) -> None:
        if not self._wait_for_devices(endpoint_id):
            with self.lock:
                if endpoint_id in self.queue:
                    self.queue.remove(endpoint_id)
            return
        with self.start_lock:
            with self.lock:
                for other in self.queue[1:]:
                    self._set(other, activity=self.queue_line(other))
            try:
                self._start_now(endpoint_id)
            except Exception as exc:  # reported on the endpoint
                log.exception("endpoint %s failed to start", endpoint_id)
                self._set(endpoint_id, state="FAILED", activity=None, error=str(exc))
            finally:
                with self.lock:
                    if endpoint_id in self.queue:
                        self.queue.remove(endpoint_id)
                    for other in self.queue:
                        self._set(other, activity=self.queue_line(other))

    def adapter_dir(self, s: Any, pinned: str) -> Path:
        """The local folder of adapter version ``pinned`` (downloaded once, by digest)."""

        rv = resolve(s, "model", pinned)
        dest = self.settings.home / "serving" / "adapters" / rv.digest.replace(":", "-")
        if not (dest / "adapter_config.json").exists():
            tmp = dest.with_name(dest.name + ".tmp")
            download_model_files(self.store, rv, tmp)
            if not dest.exists():
                tmp.replace(dest)
        return dest

    def _start_now(self, endpoint_id: str) -> None:

        # a read: the status updates inside it (_set) write in their own transactions
        with intent(write=False), self.db.session() as s:
            ep = s.get(Endpoint, endpoint_id)
            if ep is None:
                return
            base = ep.base_model
            rows = list(
                s.scalars(select(EndpointModel).where(EndpointModel.endpoint_id == endpoint_id))
            )
            self._set(endpoint_id, state="STARTING", activity="finding the base model weights")
            base_dir, _entry = ready_model_dir(s, self.settings, base)
            adapters = []
            for r in rows:
                if r.kind == "adapter":
                    self._set(endpoint_id, activity=f"fetching the adapter {r.served_name}")
                    adapters.append(
                        {
                            "name": r.served_name,
                            "path": str(self.adapter_dir(s, r.pinned)),
                            "instructions": r.instructions,
                        }
                    )
            base_row = next((r for r in rows if r.kind == "base"), None)
        w = self.workers.get(base)
        if w is None or not w.alive():
            spec = {
                "base": {
                    "name": base,
                    "dir": str(base_dir),
                    "instructions": base_row.instructions if base_row else None,
                },
                "adapters": adapters,
                "engine": self.limits.engine,
                "maxContext": self.limits.maxContextTokens,
                "maxAdapters": self.limits.maxAdaptersLoaded,
                "maxRank": self.limits.maxLoraRank,
                "mergeAdapters": self.limits.mergeAdapters,
                "precision": self.limits.precision,
            }
            folder = self.settings.home / "serving" / "workers" / base.replace("/", "_")[:80]
            placer, device = self.placement()
            w = start_worker(spec, folder, self.forker, placer=placer, device=device)
            self.workers[base] = w
            self.loaded[base] = {a["name"] for a in adapters}
            deadline = time.monotonic() + 600
            while True:
                st = w.status()
                self._set(endpoint_id, activity=f"the model is {st.get('message', 'starting')}")
                if st["phase"] in ("ready", "failed") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            w.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
        else:
            for a in adapters:
                if a["name"] not in self.loaded.setdefault(base, set()):
                    self._set(endpoint_id, activity=f"loading the adapter {a['name']}")
                    r = httpx.post(
                        w.url + "/admin/adapters", json=a, headers=w.headers(), timeout=600
                    )
                    if r.status_code != 200:
                        raise RuntimeError(r.json()["error"]["message"])
                    self.loaded[base].add(a["name"])
        self.last_used[base] = time.monotonic()
        self._set(endpoint_id, state="READY", activity="ready", error=None)
        for a in adapters:
            threading.Thread(
                target=self._check, args=(endpoint_id, a, base_dir), daemon=True
            ).start()

    # post-deploy check -------------------------------------------------------------
    def _check(self, endpoint_id: str, adapter: dict[str, Any], base_dir: Path) -> None:
        with self.db.session() as s:
            row = s.scalars(
                select(EndpointModel).where(
                    EndpointModel.endpoint_id == endpoint_id,
                    EndpointModel.served_name == adapter["name"],
                )
            ).first()
            if row is None or row.checks is not None:
                return
            row.checks = {"state": "RUNNING", "findings": [], "prompts": []}
        base = self.begin(endpoint_id)
        try:
            result = self._run_check(endpoint_id, adapter, base_dir)
        except Exception as exc:  # the check's own failure is reported, not raised
            result = {
                "state": "error",
                "findings": [f"The post-deploy check failed: {exc}"],
                "prompts": [],
            }
        finally:
            self.end(endpoint_id, base)
        with self.db.session() as s:
            row = s.scalars(
                select(EndpointModel).where(
                    EndpointModel.endpoint_id == endpoint_id,
                    EndpointModel.served_name == adapter["name"],
                )
            ).first()
            if row is not None:
                row.checks = result

    def _run_check(self, endpoint_id: str, adapter: dict[str, Any], base_dir: Path) -> dict:
        w = self.worker_for(endpoint_id)
        if w is None:
            raise RuntimeError("the endpoint stopped before the check ran")
        served = []
        for p in CHECK_PROMPTS:
            msgs = [{"role": "user", "content": p}]
            if adapter.get("instructions"):
                msgs.insert(0, {"role": "system", "content": adapter["instructions"]})
            r = httpx.post(
                w.url + "/v1/chat/completions",
                headers=w.headers(),
                timeout=600,
                json={
                    "model": adapter["name"],
                    "messages": msgs,
                    "temperature": 0,
                    "max_tokens": CHECK_MAX_TOKENS,
                },
            )
            r.raise_for_status()
            served.append(r.json()["choices"][0]["message"]["content"] or "")
        folder = w.folder / "checks"
        folder.mkdir(parents=True, exist_ok=True)
        spec = folder / f"{abs(hash(adapter['name']))}.json"
        spec.write_text(
            json.dumps(
                {
                    "baseDir": str(base_dir),
                    "adapterDir": adapter["path"],
                    "instructions": adapter.get("instructions"),
                    "served": served,
                    "precision": self.limits.precision,
                }
            )
        )
        trainer = run_check(spec, self.forker)
        return compare(
            served,
            trainer["adapter"],
            trainer["base"],
            trainer.get("shortfall"),
            precision=self.limits.precision,
        )

    # stopping ------------------------------------------------------------------
    def _idle_loop(self) -> None:
        while not self.stopping.wait(0.5):
            idle = float(self.limits.idleSeconds)
            for base in list(self.workers):
                with self.lock:
                    busy = self.in_flight.get(base, 0) > 0
                if busy:
                    continue
                if time.monotonic() - self.last_used.get(base, time.monotonic()) > idle:
                    self.stop_base(
                        base,
                        "stopped after being idle for "
                        f"{self.limits.idleSeconds}s; the next request starts it",
                    )

    def stop_base(self, base: str, why: str) -> None:
        """Stop the worker of ``base``; its READY endpoints become ``STOPPED``."""
        w = self.workers.pop(base, None)
        self.loaded.pop(base, None)
        self.last_used.pop(base, None)
        if w is not None:
            w.stop()
        with self.db.session() as s:
            for ep in s.scalars(
                select(Endpoint).where(Endpoint.base_model == base, Endpoint.state == "READY")
            ):
                ep.state, ep.activity = "STOPPED", why

    def detach(self, endpoint_id: str, served_name: str) -> None:
        """Unload ``served_name`` from the endpoint's worker (when running)."""
        w = self.worker_for(endpoint_id)
        if w is not None:
            httpx.delete(f"{w.url}/admin/adapters/{served_name}", headers=w.headers(), timeout=60)
            for names in self.loaded.values():
                names.discard(served_name)

    def shutdown(self) -> None:
        """Stop every worker (service shutdown)."""
        self.stopping.set()
        for base in list(self.workers):
            w = self.workers.pop(base)
            w.stop()


def idle_for(ep: Endpoint) -> float | None:
    """Seconds since the endpoint's last request (None before the first)."""
    if ep.last_request_at is None:
        return None
    last = ep.last_request_at
    if last.tzinfo is None:
        last = last.replace(tzinfo=dt.UTC)
    return (utcnow() - last).total_seconds()
