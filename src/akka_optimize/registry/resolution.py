"""Resolution and listing: pin any reference to the exact version it names now, list a
name's versions and the named artifacts of a kind (seeds/001: "Optimize resolves the
reference when it accepts the request, and the run records the exact version").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryAlias, RegistryName, RegistryVersion
from ..errors import NotFound
from ..refs import Ref, parse_ref, validate_name
from .records import _LABEL, ResolvedVersion, _to_resolved, check_kind, find_name


def _versions_phrase(s: Session, n: RegistryName) -> str:
    nums = s.scalars(
        select(RegistryVersion.version)
        .where(RegistryVersion.name_id == n.id)
        .order_by(RegistryVersion.version)
    ).all()
    if not nums:
        return "it has no versions"
    return "it has " + ", ".join(f"v{x}" for x in nums[-10:])


def resolve_ref(s: Session, kind: str, ref: Ref, *, field: str = "ref") -> ResolvedVersion:
    """Resolve a parsed reference to one version (see :func:`resolve`)."""
    label = _LABEL[check_kind(kind)]
    n = find_name(s, kind, ref.namespace, ref.name)
    if n is None:
        raise NotFound(f"{label} {ref.repo} is not in the registry.", field=field)
    q = select(RegistryVersion).where(RegistryVersion.name_id == n.id)
    if ref.version is not None:
        q = q.where(RegistryVersion.version == ref.version)
    if ref.digest:
        q = q.where(RegistryVersion.digest == ref.digest)
    if ref.alias:
        a = s.scalars(
            select(RegistryAlias).where(
                RegistryAlias.name_id == n.id, RegistryAlias.alias == ref.alias
            )
        ).first()
        if a is None:
            raise NotFound(f"{label} {ref.repo} has no alias {ref.alias}.", field=field)
        q = q.where(RegistryVersion.id == a.version_id)
    v = s.scalars(q.order_by(RegistryVersion.version.desc()).limit(1)).first()
    if v is None:
        raise NotFound(
            f"{label} {ref.repo} has no version {ref.selector}; {_versions_phrase(s, n)}.",
            field=field,
        )
    return _to_resolved(s, kind, n, v)


def resolve(
    session: Session, kind: str, ref: str, project: str | None = None, *, field: str = "ref"
) -> ResolvedVersion:
    """Turn any reference into the exact version it names now.

    Args:
        session: a database session.
        kind: ``dataset``, ``bundle`` or ``model``.
        ref: ``NS/NAME``, ``NS/NAME:vN``, ``NS/NAME:ALIAS``, ``NS/NAME@sha256:…`` (or the
            pinned ``NS/NAME:vN@sha256:…``), a bare NAME resolving in ``project``.
        project: the request's project.
        field: the request field named in refusals.

    Returns:
        The :class:`ResolvedVersion`; record ``.pinned`` in accepted work.

    Raises:
        InvalidRequest: the reference is malformed.
        NotFound: the name, version, alias or digest is not in the registry (a sentence
            naming what is missing and which versions exist).
    """
    return resolve_ref(session, kind, parse_ref(ref, project, field=field), field=field)


def list_versions(
    session: Session,
    kind: str,
    namespace: str,
    name: str,
    *,
    limit: int | None = None,
    after: int = 0,
) -> list[ResolvedVersion]:
    """Versions of ``namespace/name`` numbered above ``after``, oldest first, at most
    ``limit`` of them (all when None). One query for the page and one for its aliases
    (the ``(name_id, version)`` unique index serves both). Raises :class:`NotFound`."""
    n = find_name(session, check_kind(kind), namespace, name)
    if n is None:
        raise NotFound(f"{_LABEL[kind]} {namespace}/{name} is not in the registry.", field="ref")
    q = (
        select(RegistryVersion)
        .where(RegistryVersion.name_id == n.id, RegistryVersion.version > after)
        .order_by(RegistryVersion.version)
    )
    rows = session.scalars(q if limit is None else q.limit(limit)).all()
    aliases: dict[int, list[str]] = {}
    for alias, vid in session.execute(
        select(RegistryAlias.alias, RegistryAlias.version_id)
        .where(RegistryAlias.name_id == n.id)
        .order_by(RegistryAlias.alias)
    ):
        aliases.setdefault(vid, []).append(alias)
    return [_to_resolved(session, kind, n, v, aliases.get(v.id, [])) for v in rows]


def list_names(session: Session, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Named artifacts of ``kind`` (optionally in one namespace) with their latest version.

    Returns:
        ``[{"name", "versions", "latest", "digest", "aliases", "updatedAt"}]`` sorted by name.
    """
    q = select(RegistryName).where(RegistryName.kind == check_kind(kind))
    if namespace:
        q = q.where(RegistryName.namespace == validate_name(namespace, "namespace"))
    out = []
    for n in session.scalars(q.order_by(RegistryName.namespace, RegistryName.name)).all():
        v = session.scalars(
            select(RegistryVersion)
            .where(RegistryVersion.name_id == n.id)
            .order_by(RegistryVersion.version.desc())
            .limit(1)
        ).first()
        if v is None:
            continue
        aliases = session.execute(
            select(RegistryAlias.alias, RegistryVersion.version)
            .join(RegistryVersion, RegistryVersion.id == RegistryAlias.version_id)
            .where(RegistryAlias.name_id == n.id)
            .order_by(RegistryAlias.alias)
        ).all()
        out.append(
            {
                "name": f"{n.namespace}/{n.name}",
                "versions": v.version,
                "latest": f"v{v.version}",
                "digest": v.digest,
                "aliases": {a: f"v{ver}" for a, ver in aliases},
                "updatedAt": v.created_at.isoformat() if v.created_at else None,
            }
        )
    return out
