"""The background fetcher of base-model selections (:class:`SelectionManager`).

The manager claims a row with a conditional update (``PENDING`` → ``FETCHING``, so only
one process fetches a row) and runs :mod:`akka_optimize.catalog.fetch` in a subprocess
from a background thread; requests never wait on it. When the weights are in the cache it
registers the base model in the registry and sets ``READY`` in the same transaction; a
refused registration or a failed fetch ends ``FAILED`` with one sentence.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from typing import Any

from sqlalchemy import select, update

from ...db import Database, utcnow
from ...db.models.catalog import BaseModelSelection
from ...errors import AkkaError
from ...registry import register_base_model
from ...settings import Settings
from .rows import FAILED, FETCHING, PENDING, READY, settings_catalog

log = logging.getLogger("akka_optimize.catalog")


class SelectionManager:
    """Runs fetches in background threads, one per selection, each in a subprocess.

    Args:
        db: the service's database.
        settings: for the weights cache and the deployment file.
    """

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._stopping = False

    def start(self, selection_id: str) -> None:
        """Fetch the selection in the background unless a thread already does."""
        with self._lock:
            if self._stopping:
                return
            t = self._threads.get(selection_id)
            if t is not None and t.is_alive():
                return
            t = threading.Thread(
                target=self._run, args=(selection_id,), name=f"fetch-{selection_id[:8]}"
            )
            t.daemon = True
            self._threads[selection_id] = t
            t.start()

    def recover(self) -> None:
        """At start-up: restart every selection left ``PENDING`` or ``FETCHING`` by a
        previous process (its fetch died with it)."""
        with self.db.session() as s:
            s.execute(
                update(BaseModelSelection)
                .where(BaseModelSelection.state == FETCHING)
                .values(state=PENDING, progress="restarted after the service restarted")
            )
            ids = s.scalars(
                select(BaseModelSelection.id).where(BaseModelSelection.state == PENDING)
            ).all()
        for i in ids:
            self.start(i)

    def stop(self) -> None:
        """Stop starting fetches and end running fetch subprocesses (service shutdown)."""
        with self._lock:
            self._stopping = True
            procs = list(self._procs.values())
        for p in procs:
            if p.poll() is None:
                p.terminate()

    def _claim(self, selection_id: str) -> BaseModelSelection | None:
        with self.db.session() as s:
            n = s.execute(
                update(BaseModelSelection)
                .where(BaseModelSelection.id == selection_id, BaseModelSelection.state == PENDING)
                .values(
                    state=FETCHING,
                    attempts=BaseModelSelection.attempts + 1,
                    progress="starting the fetch",
                )
            ).rowcount
            if n != 1:
                return None
            return s.get(BaseModelSelection, selection_id)

    def _set(self, selection_id: str, **values: Any) -> None:
        with self.db.session() as s:
            s.execute(
                update(BaseModelSelection)
                .where(BaseModelSelection.id == selection_id)
                .values(**values)
            )

    def _run(self, selection_id: str) -> None:
        row = self._claim(selection_id)
        if row is None:
            return
        try:
            result = self._fetch(selection_id, row.repository)
            if "error" in result:
                self._set(selection_id, state=FAILED, error=result["error"], progress=None)
                return
            self._register(selection_id, row.repository, result)
        except Exception as exc:  # the row must not stay FETCHING
            log.exception("fetch of %s failed", row.repository)
            self._set(
                selection_id,
                state=FAILED,
                progress=None,
                error=f"Fetching {row.repository} failed: {type(exc).__name__}: {exc}",
            )

    def _fetch(self, selection_id: str, repository: str) -> dict[str, str]:
        weights = self.settings.weights_dir
        log_dir = weights / ".logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "akka_optimize.catalog.fetch", repository]
        cmd += ["--weights-dir", str(weights)]
        dep = self.settings.resolved_deployment_file()
        if dep:
            cmd += ["--deployment", str(dep)]
        log_path = log_dir / f"{repository.lower().replace('/', '--')}.log"
        result: dict[str, str] = {}
        with open(log_path, "ab") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            with self._lock:
                self._procs[selection_id] = proc
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(msg, dict):
                        continue
                    if "progress" in msg:
                        self._set(selection_id, progress=str(msg["progress"])[:500])
                    else:
                        result = msg
                rc = proc.wait()
            finally:
                with self._lock:
                    self._procs.pop(selection_id, None)
        if not result:
            result = {
                "error": f"The fetch of {repository} ended (exit status {rc}) without a "
                f"result; see {log_path}."
            }
        return result

    def _register(self, selection_id: str, repository: str, result: dict[str, str]) -> None:

        catalog = settings_catalog(self.settings)
        entry = catalog.require(repository)
        meta = {
            "family": entry.family,
            "modelType": entry.model_type,
            "source": entry.source.kind,
            "weightsPath": result["path"],
        }
        try:
            with self.db.session() as s:
                rv = register_base_model(
                    s, entry.repository, commit=result["commit"], metadata=meta
                )
                s.execute(
                    update(BaseModelSelection)
                    .where(BaseModelSelection.id == selection_id)
                    .values(
                        state=READY,
                        model=f"{rv.repo}:v{rv.version}",
                        commit=result["commit"],
                        weights_path=result["path"],
                        progress=None,
                        error=None,
                        ready_at=utcnow(),
                    )
                )
        except AkkaError as exc:
            self._set(
                selection_id,
                state=FAILED,
                progress=None,
                commit=result["commit"],
                weights_path=result["path"],
                error=f"The registry did not register {repository}: {exc.message}",
            )
