"""Adapter imports with an ID (F118, seeds/001 "training adapters get IMPORT_ID shows an
import's progress"; issue 54 item 6).

``POST /v1/registry/adapter-imports/NS/NAME`` takes the adapter's tar, refuses at once
what needs no reading of it (the namespace, the alias, a base model that is not selected
and cached), records an :class:`~akka_optimize.db.models.registry.AdapterImport` in
``CHECKING`` and answers its ID; the work then runs in this process, one stage after the
other (:data:`STAGES`), recording each before it starts, and ends ``REGISTERED`` with the
version or ``FAILED`` with the sentence of the rule the adapter broke. A refused import
registers nothing (the version row is the last thing written). A process that dies
mid-import leaves its record ``CHECKING``; the next start-up on its host fails it with a
sentence (:func:`fail_orphans`).
"""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import testhooks
from ..db.base import utcnow
from ..db.models.registry import AdapterImport
from ..errors import AkkaError, InvalidRequest, NotFound
from ..forkserver import pid_exists
from .access.scope import scope
from .auth import Principal
from .context import ServiceContext
from .uploads import (
    base_dir_for,
    check_upload,
    extract_tar,
    register_checked_adapter,
    registry_limits,
    uploads_dir,
)

STAGES = (
    "unpacking the adapter archive",
    "checking the adapter against the base model (config, tensor names and shapes, "
    "target modules, rank)",
    "registering the version",
)
"""The stages of an import, in order; ``stage`` counts those done."""


def owner() -> str:
    """``host:pid`` of this process (an import's ``owner``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def view(imp: AdapterImport) -> dict[str, Any]:
    """An import as ``training adapters get`` shows it (:class:`..schemas.AdapterImportView`)."""
    return {
        "id": imp.id,
        "name": f"{imp.namespace}/{imp.name}",
        "baseModel": imp.base_model,
        "alias": imp.alias,
        "state": imp.state,
        "stagesDone": imp.stage,
        "stagesTotal": len(STAGES),
        "progress": imp.progress,
        "error": imp.error,
        "model": imp.model,
        "checks": imp.details or None,
        "createdAt": imp.created_at.isoformat(),
        "finishedAt": imp.finished_at.isoformat() if imp.finished_at else None,
    }


def find_import(s: Session, principal: Principal | None, import_id: str) -> AdapterImport:
    """The import with this ID or unambiguous prefix among those the caller sees (a project
    token: imports into its own namespace).

    Raises:
        NotFound: (field ``import``) none the caller sees.
        InvalidRequest: (field ``import``) the prefix matches several.
    """
    key = import_id.strip().lower()
    q = select(AdapterImport).where(AdapterImport.id.startswith(key, autoescape=True))
    mine = scope(principal)
    if mine is not None:
        q = q.where(AdapterImport.namespace == mine)
    hits = list(s.scalars(q.limit(2)))
    if not key or not hits:
        raise NotFound(f"No adapter import {import_id!r}.", field="import")
    if len(hits) > 1:
        raise InvalidRequest(
            f"The import ID prefix {import_id!r} matches several imports; give more of it.",
            field="import",
        )
    return hits[0]


def _advance(ctx: ServiceContext, import_id: str, stage: int) -> None:
    with ctx.db.session() as s:
        imp = s.get(AdapterImport, import_id)
        if imp is not None:
            imp.stage, imp.progress = stage, STAGES[stage]


def _finish(ctx: ServiceContext, import_id: str, **fields: Any) -> None:
    with ctx.db.session() as s:
        imp = s.get(AdapterImport, import_id)
        if imp is not None:
            for k, v in fields.items():
                setattr(imp, k, v)
            imp.finished_at = utcnow()


def record_import(
    ctx: ServiceContext, namespace: str, name: str, base_model: str, alias: str | None
) -> dict[str, Any]:
    """Record a new import into model ``namespace/name`` (lower-cased) of an adapter of
    ``base_model``, ``CHECKING`` at its first stage and owned by this process
    (:func:`owner`); returns its API view (:func:`view`), whose ``id`` :func:`run_import`
    then works on."""
    with ctx.db.session() as s:
        imp = AdapterImport(id=uuid.uuid4().hex, namespace=namespace.lower(), name=name.lower(),
                            base_model=base_model, alias=alias, state="CHECKING", stage=0,
                            progress=STAGES[0], details={}, owner=owner())  # fmt: skip
        s.add(imp)
        s.flush()
        return view(imp)


def run_import(ctx: ServiceContext, import_id: str, archive: Path) -> None:
    """Do import ``import_id`` from its spooled ``archive`` (removed at the end): the
    stages of :data:`STAGES`, recorded as they start; ``REGISTERED`` with the version's
    pinned reference, or ``FAILED`` with the sentence of what refused it."""
    try:
        with ctx.db.session() as s:
            imp = s.get(AdapterImport, import_id)
            ns, name, base, alias = imp.namespace, imp.name, imp.base_model, imp.alias
        with tempfile.TemporaryDirectory(dir=uploads_dir(ctx)) as tmp:
            _advance(ctx, import_id, 0)
            extract_tar(archive, Path(tmp), registry_limits(ctx))
            _advance(ctx, import_id, 1)
            testhooks.hold("adapter-import")  # tests: an import stopped while it checks
            with ctx.db.session() as s:
                checked = check_upload(ctx, s, Path(tmp), base)
            _advance(ctx, import_id, 2)
            with ctx.db.session() as s:
                rv, _ = register_checked_adapter(
                    ctx, s, Path(tmp), ns, name, base_model=base, alias=alias,
                    metadata={"registeredBy": "import", "importId": import_id, **checked},
                )  # fmt: skip
                pinned = rv.pinned
        _finish(ctx, import_id, state="REGISTERED", stage=len(STAGES), model=pinned,
                details=checked, progress=f"registered as {pinned}")  # fmt: skip
    except AkkaError as exc:
        _finish(ctx, import_id, state="FAILED", error=exc.message, progress="refused")
    except Exception as exc:  # a failure of the service, said as one sentence
        _finish(ctx, import_id, state="FAILED", progress="failed",
                error=f"The import failed unexpectedly ({type(exc).__name__}: {exc}).")  # fmt: skip
    finally:
        archive.unlink(missing_ok=True)


def check_before(ctx: ServiceContext, s: Session, base_model: str) -> None:
    """What is refused before anything is recorded: a base model that is not selected and
    cached here (InvalidRequest naming the select command, as ``check_upload`` says it)."""
    base_dir_for(ctx, s, base_model)


def fail_orphans(ctx: ServiceContext) -> None:
    """Fail the ``CHECKING`` imports of this host whose process is gone (start-up)."""
    host = socket.gethostname()
    with ctx.db.session() as s:
        for imp in s.scalars(select(AdapterImport).where(AdapterImport.state == "CHECKING")):
            h, _, pid = imp.owner.rpartition(":")
            if h == host and pid.isdigit() and not pid_exists(int(pid)):
                imp.state, imp.progress, imp.finished_at = "FAILED", "failed", utcnow()
                imp.error = (
                    "The service stopped while it checked this import; nothing was "
                    "registered. Import the adapter again."
                )
