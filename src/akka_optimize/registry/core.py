"""Names, versions, aliases and resolution, shared by every artifact kind.

Resolution pins a reference to one version, ``NS/NAME:vN@sha256:<hex>`` (seeds/001:
"Optimize resolves the reference when it accepts the request, and the run records the
exact version … Moving an alias later does not change accepted work").

Concurrency: a version row is inserted inside a SAVEPOINT; the unique constraints on
``(name, digest)`` and ``(name, version)`` turn a race into an ``IntegrityError``, after
which the insert is retried against the now-visible winner. Two identical registrations
racing each other therefore create one version.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryAlias, RegistryName, RegistryVersion
from ..errors import Conflict, InvalidRequest, NotFound, TooLarge
from ..refs import MAX_VERSION, Ref, parse_ref, validate_name

KINDS = ("dataset", "bundle", "model")
_LABEL = {"dataset": "Dataset", "bundle": "Scoring bundle", "model": "Model"}
RESERVED_ALIASES = ("latest",)


@dataclass
class ResolvedVersion:
    """One exact version of a registry artifact.

    Attributes:
        kind: ``dataset``, ``bundle`` or ``model``.
        namespace, name: lower-case parts of the name.
        version: N of ``vN`` (>= 1).
        digest: ``sha256:<64 hex>`` over the version's content.
        pinned: ``ns/name:vN@sha256:<hex>``; parse it with :func:`akka_optimize.refs.parse_ref`.
        metadata: kind-specific facts (rows, bytes, repository, commit, annotations…).
        created_at: when the version was registered (UTC).
        size: stored bytes of the version's content.
        files: relative path → ``{"digest", "size"}`` of the version's blobs.
        source: ``upload`` (datasets, bundles), ``base`` (a base model) or ``adapter``.
        base_model: pinned base-model version a trained model was trained on.
        parent_model: pinned model version a reinforcement run started from.
        run_id: the run that produced a trained model.
        aliases: aliases pointing at this version.
    """

    kind: str
    namespace: str
    name: str
    version: int
    digest: str
    pinned: str
    metadata: dict[str, Any]
    created_at: dt.datetime | None
    size: int = 0
    files: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    base_model: str | None = None
    parent_model: str | None = None
    run_id: str | None = None
    aliases: list[str] = field(default_factory=list)

    @property
    def repo(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """The API's JSON shape of a version (camelCase keys)."""
        return {
            "kind": self.kind,
            "name": self.repo,
            "version": f"v{self.version}",
            "digest": self.digest,
            "ref": self.pinned,
            "size": self.size,
            "aliases": list(self.aliases),
            "metadata": self.metadata,
            "source": self.source,
            "baseModel": self.base_model,
            "parentModel": self.parent_model,
            "runId": self.run_id,
            "files": self.files,
            "createdAt": self.created_at.isoformat() if self.created_at else None,
        }


def check_kind(kind: str) -> str:
    """``kind`` if known. Raises :class:`InvalidRequest` (field ``kind``)."""
    if kind not in KINDS:
        raise InvalidRequest(f"kind must be one of {', '.join(KINDS)}, not {kind!r}.", field="kind")
    return kind


def sha256_json(obj: Any) -> str:
    """``sha256:<hex>`` of canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _to_resolved(
    s: Session, kind: str, n: RegistryName, v: RegistryVersion, aliases: list[str] | None = None
) -> ResolvedVersion:
    if aliases is None:
        aliases = s.scalars(
            select(RegistryAlias.alias).where(RegistryAlias.version_id == v.id).order_by("alias")
        ).all()
    return ResolvedVersion(
        kind=kind,
        namespace=n.namespace,
        name=n.name,
        version=v.version,
        digest=v.digest,
        pinned=f"{n.namespace}/{n.name}:v{v.version}@{v.digest}",
        metadata=dict(v.metadata_ or {}),
        created_at=v.created_at,
        size=v.size or 0,
        files=dict(v.files or {}),
        source=v.source,
        base_model=v.base_model,
        parent_model=v.parent_model,
        run_id=v.run_id,
        aliases=list(aliases),
    )


def find_name(s: Session, kind: str, namespace: str, name: str) -> RegistryName | None:
    """The name row of ``kind`` ``namespace/name``, or None."""
    return s.scalars(
        select(RegistryName).where(
            RegistryName.kind == kind,
            RegistryName.namespace == namespace,
            RegistryName.name == name,
        )
    ).first()


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
    v = s.scalars(q.order_by(RegistryVersion.version.desc())).first()
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


_VERSION_ARG = re.compile(r"v?([0-9]+)")


def parse_version(version: int | str, field: str = "version") -> int:
    """``3``, ``"3"`` or ``"v3"`` → 3. Raises :class:`InvalidRequest`."""
    if isinstance(version, int) and not isinstance(version, bool):
        num = version
    else:
        m = _VERSION_ARG.fullmatch(str(version).strip().lower())
        if not m:
            raise InvalidRequest(f"{field} must look like v3, not {version!r}.", field=field)
        num = int(m.group(1))
    if num < 1:
        raise InvalidRequest(f"{field} must be v1 or later, not {version!r}.", field=field)
    if num > MAX_VERSION:
        raise InvalidRequest(
            f"{field} {str(version)[:30]!r} is larger than {MAX_VERSION}, the largest version.",
            field=field,
        )
    return num


def check_alias(alias: str) -> str:
    """``alias`` if it can name an alias; registrations check it before they store anything.

    Raises:
        InvalidRequest: not a valid name, or ``latest`` or ``vN`` (it would read as a version).
    """
    alias = validate_name(alias, "alias")
    if alias in RESERVED_ALIASES or re.fullmatch(r"v[0-9]+", alias):
        raise InvalidRequest(
            f"alias {alias!r} is reserved: it would read as a version; choose another name.",
            field="alias",
        )
    return alias


def set_alias(
    session: Session, kind: str, namespace: str, name: str, alias: str, version: int | str
) -> ResolvedVersion:
    """Point ``alias`` of ``namespace/name`` at ``version`` (creating or moving it).

    Accepted work keeps its pinned version: moving an alias changes only later
    resolutions (seeds/001 "candidate and champion are aliases on a named model").

    Raises:
        InvalidRequest: the alias is not a valid name, is ``latest`` or looks like ``vN``.
        NotFound: the name or the version does not exist.
    """
    alias = check_alias(alias)
    num = parse_version(version)
    ns, nm = validate_name(namespace, "namespace"), validate_name(name, "name")
    target = resolve_ref(session, kind, Ref(ns, nm, version=num), field="version")
    n = find_name(session, kind, ns, nm)
    assert n is not None
    v_id = session.scalar(
        select(RegistryVersion.id).where(
            RegistryVersion.name_id == n.id, RegistryVersion.version == num
        )
    )
    _upsert_alias(session, n.id, alias, v_id)
    return resolve_ref(session, kind, Ref(ns, nm, version=target.version))


def _upsert_alias(s: Session, name_id: int, alias: str, version_id: int) -> None:
    for _ in range(5):
        row = s.scalars(
            select(RegistryAlias).where(
                RegistryAlias.name_id == name_id, RegistryAlias.alias == alias
            )
        ).first()
        if row is not None:
            row.version_id = version_id
            s.flush()
            return
        try:
            with s.begin_nested():
                s.add(RegistryAlias(name_id=name_id, alias=alias, version_id=version_id))
                s.flush()
            return
        except IntegrityError:
            continue


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
    return _to_resolved(session, kind, n, row), created


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
    return _to_resolved(session, kind, n, row)
