"""Base-model selections: the state machine, listing and the background fetcher.

A selection (one :class:`~akka_optimize.db.models.catalog.BaseModelSelection` row per
repository) moves ``PENDING`` → ``FETCHING`` → ``READY`` or ``FAILED``:

- ``select`` inserts the row (or finds it) and asks the :class:`SelectionManager` to
  fetch; selecting a ``READY`` model again does nothing, selecting a ``FAILED`` one
  starts a new attempt.
- The manager claims the row with a conditional update (``PENDING`` → ``FETCHING``,
  so only one process fetches a row) and runs :mod:`akka_optimize.catalog.fetch` in a
  subprocess from a background thread; requests never wait on it.
- When the weights are in the cache it registers the base model in the registry
  (``owner/repo:vN``, seeds/001 "Models live in the registry") and sets ``READY`` in
  the same transaction; a refused registration or a failed fetch ends ``FAILED`` with
  one sentence (seeds/001 "Base model selection").
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db import Database, utcnow
from ..db.models.catalog import BaseModelSelection
from ..errors import AkkaError, Conflict, InvalidRequest
from ..refs import repository_ref
from ..settings import Settings
from .entries import Catalog, CatalogEntry, load_catalog
from .sources import source_commit

log = logging.getLogger("akka_optimize.catalog")

PENDING, FETCHING, READY, FAILED = "PENDING", "FETCHING", "READY", "FAILED"
STATES = (PENDING, FETCHING, READY, FAILED)


def settings_catalog(settings: Settings) -> Catalog:
    """The catalog of the deployment file ``settings`` points at (shipped when none)."""
    from ..deployment import load_deployment

    return load_catalog(load_deployment(settings.resolved_deployment_file()))


def get_selection(session: Session, repository: str) -> BaseModelSelection | None:
    """The selection row of ``repository`` (any case), or None."""
    key = repository.strip().split("@", 1)[0].split(":", 1)[0].lower()
    return session.scalars(
        select(BaseModelSelection).where(BaseModelSelection.repository_key == key)
    ).first()


def find_entry(session: Session, catalog: Catalog, ref: str) -> CatalogEntry:
    """The catalog entry ``ref`` names: a repository (``Owner/Repo``), a registry
    reference of a base-model version (``owner/repo:v1``), or an unambiguous prefix of a
    selection ID (seeds/001 "ID prefixes").

    Raises:
        NotFound: nothing in the catalog matches; the sentence names the catalog.
        InvalidRequest: an ID prefix matches several selections.
    """
    text = ref.strip()
    if "/" not in text and text:
        rows = session.scalars(
            select(BaseModelSelection).where(
                BaseModelSelection.id.startswith(text.lower(), autoescape=True)
            )
        ).all()
        if len(rows) > 1:
            raise InvalidRequest(
                f"The ID prefix {text!r} matches {len(rows)} base-model selections; give more "
                "of the ID.",
                field="ref",
            )
        if rows:
            return catalog.require(rows[0].repository)
    return catalog.require(text, field="ref")


def cached(row: BaseModelSelection | None) -> bool:
    """Whether the row's weights are in the cache now (``config.json`` present)."""
    return bool(row and row.weights_path and (Path(row.weights_path) / "config.json").is_file())


def entry_view(entry: CatalogEntry, row: BaseModelSelection | None, catalog: Catalog) -> dict:
    """The API's JSON shape of one base model (seeds/001 "Base model listing": ``model`` is
    the registered version, or ``repository@commit`` when not registered)."""
    commit = row.commit if row and row.commit else None
    problem = None
    if commit is None:
        try:
            commit = source_commit(entry, catalog)
        except AkkaError as exc:
            problem = exc.message
        if commit is None and not problem:
            commit = getattr(entry.source, "revision", None)
    model = row.model if row and row.model else f"{entry.repository}@{commit or 'unknown'}"
    return {
        "id": row.id if row else None,
        "repository": entry.repository,
        "model": model,
        "selected": row is not None,
        "state": row.state if row else None,
        "cached": cached(row),
        "default": entry is catalog.default,
        "family": entry.family,
        "modelType": entry.model_type,
        "source": entry.source.kind,
        "commit": commit,
        "weightsPath": row.weights_path if row else None,
        "progress": row.progress if row else None,
        "error": (row.error if row else None) or problem,
        "attempts": row.attempts if row else 0,
        "envelope": {
            k: v.model_dump(by_alias=True, mode="json") for k, v in entry.envelope.items()
        },
        "selectedAt": row.created_at.isoformat() if row else None,
        "readyAt": row.ready_at.isoformat() if row and row.ready_at else None,
    }


def list_base_models(session: Session, catalog: Catalog, *, all_entries: bool) -> list[dict]:
    """Selected base models (any state), or with ``all_entries`` every catalog entry."""
    rows = {r.repository_key: r for r in session.scalars(select(BaseModelSelection)).all()}
    out = []
    for e in catalog:
        row = rows.get(e.key)
        if row is not None or all_entries:
            out.append(entry_view(e, row, catalog))
    return out


def select_base_model(session: Session, catalog: Catalog, repository: str) -> BaseModelSelection:
    """Select ``repository``: insert its row (``PENDING``), or return the existing one,
    resetting a ``FAILED`` one (or a ``READY`` one whose weights left the cache) to
    ``PENDING``. Commits. The caller then calls :meth:`SelectionManager.start`.

    Raises:
        NotFound: the catalog does not allow ``repository`` (names the catalog).
        InvalidRequest: the registry cannot name the repository (seeds/001 "Base model
            selection").
    """
    entry = catalog.require(repository)
    try:
        repository_ref(entry.repository)
    except InvalidRequest as exc:
        raise InvalidRequest(
            f"The registry cannot name {entry.repository} as a model, so it cannot be "
            f"selected: {exc.message}",
            code="unnameable_repository",
            field="repository",
        ) from exc
    row = get_selection(session, entry.key)
    if row is None:
        row = BaseModelSelection(
            id=uuid.uuid4().hex, repository=entry.repository, repository_key=entry.key
        )
        session.add(row)
        try:
            session.commit()
            return row
        except IntegrityError:  # selected at the same moment by another request
            session.rollback()
            row = get_selection(session, entry.key)
            assert row is not None
    if row.state == FAILED or (row.state == READY and not cached(row)):
        session.execute(
            update(BaseModelSelection)
            .where(BaseModelSelection.id == row.id, BaseModelSelection.state == row.state)
            .values(state=PENDING, error=None, progress=None)
        )
    session.commit()
    session.refresh(row)
    return row


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
        from ..registry import register_base_model

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


def require_ready(session: Session, catalog: Catalog, ref: str) -> tuple[Path, CatalogEntry]:
    """The weights folder of the base model ``ref`` names, when it is selected and ``READY``.

    Raises:
        NotFound: ``ref`` is not in the catalog (``code`` ``not_in_catalog``).
        Conflict: ``code`` ``base_model_not_selected`` (never selected),
            ``base_model_not_ready`` (``PENDING``/``FETCHING``, or weights gone from the
            cache), ``base_model_failed`` (``FAILED``; the message carries its reason), or
            ``base_model_version_mismatch`` (``ref`` names a version whose commit is not
            the cached one).
    """
    entry = catalog.require(ref.strip(), field="baseModel")
    row = get_selection(session, entry.key)
    hint = f"`training base-models select {entry.repository} --wait`"
    if row is None:
        raise Conflict(
            f"Base model {entry.repository} is not selected; select it with {hint}.",
            code="base_model_not_selected",
            field="baseModel",
        )
    if row.state == FAILED:
        raise Conflict(
            f"Base model {entry.repository} failed: {row.error}",
            code="base_model_failed",
            field="baseModel",
        )
    if row.state != READY:
        raise Conflict(
            f"Base model {entry.repository} is {row.state}"
            + (f" ({row.progress})" if row.progress else "")
            + "; its weights are not in the cache yet.",
            code="base_model_not_ready",
            field="baseModel",
        )
    if not cached(row):
        raise Conflict(
            f"The weights of base model {entry.repository} are no longer in the cache "
            f"({row.weights_path}); select it again with {hint}.",
            code="base_model_not_ready",
            field="baseModel",
        )
    _check_version(session, entry, row, ref)
    return Path(row.weights_path or ""), entry


def _check_version(
    session: Session, entry: CatalogEntry, row: BaseModelSelection, ref: str
) -> None:
    text = ref.strip()
    if ":" not in text and "@" not in text:
        return
    _, at, after = text.partition("@")
    if at and not after.lower().startswith("sha256:"):
        commit: str | None = after  # repository@commit, as base-models list shows it
    else:
        from ..registry import resolve

        commit = (resolve(session, "model", text, field="baseModel").metadata or {}).get("commit")
    if commit != row.commit:
        raise Conflict(
            f"{text} was registered from commit {commit}, but the weights cache holds "
            f"{entry.repository}@{row.commit} ({row.model}); use {row.model}.",
            code="base_model_version_mismatch",
            field="baseModel",
        )
