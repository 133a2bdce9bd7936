"""Versions and aliases: parse ``vN`` arguments, check alias names, and point an alias at
a version (seeds/001 "candidate and champion are aliases on a named model"; accepted
work keeps its pinned version).
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryAlias, RegistryVersion
from ..errors import InvalidRequest
from ..refs import MAX_VERSION, Ref, validate_name
from .records import ResolvedVersion, find_name
from .resolution import resolve_ref

RESERVED_ALIASES = ("latest",)
_VERSION_ARG = re.compile(r"v?([0-9]+)")
VERSION_PATTERN = r"^[Vv]?0*[1-9][0-9]{0,17}$"
"""The versions :func:`parse_version` takes, as the API document states them."""


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
