"""The registry's records: the artifact kinds, one exact version as callers see it
(:class:`ResolvedVersion`), and the lookups every other registry module builds on
(:func:`find_name`, :func:`sha256_json`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryAlias, RegistryName, RegistryVersion
from ..errors import InvalidRequest

KINDS = ("dataset", "bundle", "model")
LABEL = {"dataset": "Dataset", "bundle": "Scoring bundle", "model": "Model"}


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


def to_resolved(
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
