"""Resolution and listing: pin any reference to the exact version it names now, list a
name's versions and the named artifacts of a kind (seeds/001: "Optimize resolves the
reference when it accepts the request, and the run records the exact version").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryAlias, RegistryName, RegistryVersion
from ..errors import NotFound
from ..refs import Ref, parse_ref, validate_name
from .records import LABEL, ResolvedVersion, check_kind, find_name, to_resolved


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
    label = LABEL[check_kind(kind)]
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
    return to_resolved(s, kind, n, v)


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
        raise NotFound(f"{LABEL[kind]} {namespace}/{name} is not in the registry.", field="ref")
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
    return [to_resolved(session, kind, n, v, aliases.get(v.id, [])) for v in rows]


_LATEST = (
    select(RegistryVersion.name_id, func.max(RegistryVersion.version).label("top"))
    .group_by(RegistryVersion.name_id)
    .subquery()
)
_NAMES = (
    select(
        RegistryName.id,
        RegistryName.namespace,
        RegistryName.name,
        RegistryVersion.version,
        RegistryVersion.digest,
        RegistryVersion.created_at,
    )
    .join(_LATEST, _LATEST.c.name_id == RegistryName.id)
    .join(
        RegistryVersion,
        (RegistryVersion.name_id == RegistryName.id) & (RegistryVersion.version == _LATEST.c.top),
    )
    .where(RegistryName.kind == bindparam("kind"))
    .order_by(RegistryName.namespace, RegistryName.name)
)
_NAMES_IN = _NAMES.where(RegistryName.namespace == bindparam("namespace"))
_ALIASES_OF = (
    select(RegistryAlias.name_id, RegistryAlias.alias, RegistryVersion.version)
    .join(RegistryVersion, RegistryVersion.id == RegistryAlias.version_id)
    .where(RegistryAlias.name_id.in_(bindparam("ids", expanding=True)))
    .order_by(RegistryAlias.name_id, RegistryAlias.alias)
)


def list_names(session: Session, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Named artifacts of ``kind`` (optionally in one namespace) with their latest version.

    Two statements whatever the number of names (names with their latest version, then
    the aliases of all of them), each built once, not two queries per name (issue 14,
    load).

    Returns:
        ``[{"name", "versions", "latest", "digest", "aliases", "updatedAt"}]`` sorted by name.
    """
    if namespace:
        params = {"kind": check_kind(kind), "namespace": validate_name(namespace, "namespace")}
        rows = session.execute(_NAMES_IN, params).all()
    else:
        rows = session.execute(_NAMES, {"kind": check_kind(kind)}).all()
    aliases: dict[int, dict[str, str]] = {}
    if rows:
        for name_id, alias, ver in session.execute(_ALIASES_OF, {"ids": [r[0] for r in rows]}):
            aliases.setdefault(name_id, {})[alias] = f"v{ver}"
    return [
        {
            "name": f"{ns}/{name}",
            "versions": version,
            "latest": f"v{version}",
            "digest": digest,
            "aliases": aliases.get(name_id, {}),
            "updatedAt": created.isoformat() if created else None,
        }
        for name_id, ns, name, version, digest, created in rows
    ]
