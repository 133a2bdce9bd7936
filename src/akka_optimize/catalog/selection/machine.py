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

This module owns selecting, finding, listing and requiring a base model; the row's states
and lookups live in :mod:`.rows`, the background fetcher in
:mod:`.manager`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...db.models.catalog import BaseModelSelection
from ...errors import AkkaError, Conflict, InvalidRequest
from ...refs import repository_ref
from ..entries import Catalog, CatalogEntry
from ..sources import source_commit
from .manager import SelectionManager as SelectionManager
from .rows import FAILED, PENDING, READY, cached
from .rows import get_selection as get_selection
from .rows import settings_catalog as settings_catalog


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
        from ...registry import resolve  # lazy: guarded

        commit = (resolve(session, "model", text, field="baseModel").metadata or {}).get("commit")
    if commit != row.commit:
        raise Conflict(
            f"{text} was registered from commit {commit}, but the weights cache holds "
            f"{entry.repository}@{row.commit} ({row.model}); use {row.model}.",
            code="base_model_version_mismatch",
            field="baseModel",
        )
