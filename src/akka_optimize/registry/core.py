"""Names, versions, aliases and resolution, shared by every artifact kind.

Resolution pins a reference to one version, ``NS/NAME:vN@sha256:<hex>`` (seeds/001:
"Optimize resolves the reference when it accepts the request, and the run records the
exact version … Moving an alias later does not change accepted work").

Concurrency: a version row is inserted inside a SAVEPOINT; the unique constraints on
``(name, digest)`` and ``(name, version)`` turn a race into an ``IntegrityError``, after
which the insert is retried against the now-visible winner. Two identical registrations
racing each other therefore create one version.

This module owns creating names and versions, registering and annotating; the records
live in :mod:`.records`, resolution and listing in :mod:`.resolution`, versions and
aliases in :mod:`.aliases`, and every name stays importable from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryName, RegistryVersion
from ..errors import Conflict, InvalidRequest, TooLarge
from ..refs import Ref
from .aliases import check_alias as check_alias
from .aliases import parse_version as parse_version
from .aliases import set_alias as set_alias
from .records import KINDS as KINDS
from .records import ResolvedVersion as ResolvedVersion
from .records import find_name as find_name
from .records import sha256_json as sha256_json
from .records import to_resolved
from .resolution import list_names as list_names
from .resolution import list_versions as list_versions
from .resolution import resolve as resolve


def get_or_create_name(s: Session, kind: str, namespace: str, name: str) -> RegistryName:
    """The name row, created when missing (safe against a concurrent creation)."""
    for _ in range(5):
        row = find_name(s, kind, namespace, name)
        if row is not None:
            return row
        try:
            with s.begin_nested():
                row = RegistryName(kind=kind, namespace=namespace, name=name)
                s.add(row)
                s.flush()
            return row
        except IntegrityError:
            continue
    raise Conflict(f"Could not create {kind} {namespace}/{name}; retry the request.")


def insert_version(
    s: Session, n: RegistryName, digest: str, **fields: Any
) -> tuple[RegistryVersion, bool]:
    """Insert the next version of ``n`` with ``digest``, or return the one holding it.

    Call only after every blob the version names is committed to the store.

    Returns:
        ``(row, created)``; ``created`` is False when ``n`` already had ``digest``.
    """
    for _ in range(10):
        existing = s.scalars(
            select(RegistryVersion).where(
                RegistryVersion.name_id == n.id, RegistryVersion.digest == digest
            )
        ).first()
        if existing is not None:
            return existing, False
        top = s.scalar(
            select(func.max(RegistryVersion.version)).where(RegistryVersion.name_id == n.id)
        )
        try:
            with s.begin_nested():
                row = RegistryVersion(name_id=n.id, version=(top or 0) + 1, digest=digest, **fields)
                s.add(row)
                s.flush()
            return row, True
        except IntegrityError:
            continue
    raise Conflict(f"Could not register a version of {n.namespace}/{n.name}; retry the request.")


def register_version(
    session: Session,
    kind: str,
    ref: Ref,
    digest: str,
    *,
    alias: str | None = None,
    check: Callable[[Session, RegistryName], None] | None = None,
    **fields: Any,
) -> tuple[ResolvedVersion, bool]:
    """Insert (or find) the version of ``ref``'s name holding ``digest`` and set ``alias``.

    ``check(session, name_row)`` runs before the insert and may refuse (name guards).
    """
    if ref.version is not None or ref.alias or ref.digest:
        raise InvalidRequest(
            f"Register under NS/NAME without a version, alias or digest, not {ref}; "
            "use --alias to point an alias at the new version.",
            field="ref",
        )
    n = get_or_create_name(session, kind, ref.namespace, ref.name)
    if check is not None:
        check(session, n)
    row, created = insert_version(session, n, digest, **fields)
    if alias:
        set_alias(session, kind, ref.namespace, ref.name, alias, row.version)
    return to_resolved(session, kind, n, row), created


def annotate(
    session: Session,
    kind: str,
    ref: str,
    annotations: dict[str, Any],
    project: str | None = None,
    *,
    limit: int | None = None,
) -> ResolvedVersion:
    """Merge ``annotations`` into a version's ``metadata.annotations`` (a value of None removes
    a key).

    Raises:
        InvalidRequest: non-string keys.
        TooLarge: the merged annotations, as JSON, exceed ``limit`` bytes
            (``limits.annotationBytes`` of the deployment file).
        NotFound: no such version.
    """
    if not isinstance(annotations, dict) or not all(isinstance(k, str) for k in annotations):
        raise InvalidRequest("annotations must be an object with string keys.", field="annotations")
    r = resolve(session, kind, ref, project)
    n = find_name(session, kind, r.namespace, r.name)
    assert n is not None
    row = session.scalars(
        select(RegistryVersion).where(
            RegistryVersion.name_id == n.id, RegistryVersion.version == r.version
        )
    ).one()
    meta = dict(row.metadata_ or {})
    notes = dict(meta.get("annotations") or {})
    for k, v in annotations.items():
        if v is None:
            notes.pop(k, None)
        else:
            notes[k] = v
    size = len(json.dumps(notes, ensure_ascii=False).encode())
    if limit is not None and size > limit:
        raise TooLarge(
            f"The annotations of {r.pinned} would be {size:,} bytes as JSON; the limit is "
            f"{limit:,} bytes (limits.annotationBytes in the deployment file).",
            field="annotations",
        )
    meta["annotations"] = notes
    row.metadata_ = meta
    session.flush()
    return to_resolved(session, kind, n, row)
