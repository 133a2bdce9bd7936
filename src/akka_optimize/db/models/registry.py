"""Tables of the artifact registry (seeds/001 "Datasets/Scoring bundles/Models live in the
registry"): named artifacts, their immutable versions, aliases, and pushed images.

A version row is inserted only after every blob it names is committed to the store, and
the unique constraints make concurrent identical registrations create one version.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


class RegistryName(Base):
    """A named artifact ``namespace/name`` of one kind (``dataset``, ``bundle``, ``model``)."""

    __tablename__ = "registry_names"
    __table_args__ = (UniqueConstraint("kind", "namespace", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    namespace: Mapped[str] = mapped_column(String(100), index=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RegistryVersion(Base):
    """One immutable version ``vN`` of a named artifact.

    ``digest`` is ``sha256:<hex>`` over the version's content (canonical examples for a
    dataset, the file manifest for a bundle or an adapter). ``files`` maps relative paths to
    ``{"digest", "size"}`` of blobs; ``metadata_`` holds kind-specific facts (row count,
    base-model repository and commit, annotations…). Models record ``base_model`` (pinned
    reference of the base-model version, None for a base model itself), ``parent_model``
    (pinned reference a reinforcement run started from) and ``run_id``.
    """

    __tablename__ = "registry_versions"
    __table_args__ = (
        UniqueConstraint("name_id", "version"),
        UniqueConstraint("name_id", "digest"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name_id: Mapped[int] = mapped_column(
        ForeignKey("registry_names.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71), index=True)
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    base_model: Mapped[str | None] = mapped_column(String(300), nullable=True)
    parent_model: Mapped[str | None] = mapped_column(String(300), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RegistryAlias(Base):
    """An alias (``candidate``, ``champion``, …) pointing at one version of a named artifact."""

    __tablename__ = "registry_aliases"
    __table_args__ = (UniqueConstraint("name_id", "alias"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name_id: Mapped[int] = mapped_column(
        ForeignKey("registry_names.id", ondelete="CASCADE"), index=True
    )
    alias: Mapped[str] = mapped_column(String(100))
    version_id: Mapped[int] = mapped_column(ForeignKey("registry_versions.id", ondelete="CASCADE"))
    updated_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class RegistryImage(Base):
    """An image pushed to the registry (``registry images push``), stored by content digest."""

    __tablename__ = "registry_images"

    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String(64))
    filename: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RegistryImageProject(Base):
    """A training project an image belongs to: pushed with one of its tokens, or part of a
    dataset registered in its namespace. A project token reads only its projects' images
    (issue 14 item 1)."""

    __tablename__ = "registry_image_projects"

    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), primary_key=True)


class AdapterImport(Base):
    """One ``training adapters import`` (F118; issue 54 item 6): an uploaded PEFT adapter
    being checked against its base model, then registered or refused.

    Attributes:
        id: 32 hex digits; ``training adapters get`` takes an unambiguous prefix.
        namespace, name: where the version is registered (lower case).
        base_model: the base model's pinned version the adapter is checked against.
        state: ``CHECKING``, ``REGISTERED`` or ``FAILED``.
        stage: how many of the import's stages are done (of
            :data:`akka_optimize.core.adapter_imports.STAGES`), and ``progress`` the
            stage under way, or the outcome, as a sentence.
        error: why it failed (one sentence); nothing was registered.
        model: the registered version's pinned reference once ``REGISTERED``.
        owner: ``host:pid`` of the service process doing the work (a start-up on that host
            fails an import whose process is gone).
    """

    __tablename__ = "adapter_imports"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(128))
    base_model: Mapped[str] = mapped_column(String(512))
    alias: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="CHECKING")
    stage: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[str] = mapped_column(String(512), default="")
    error: Mapped[str | None] = mapped_column(String(4000), nullable=True)
    model: Mapped[str | None] = mapped_column(String(512), nullable=True)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    owner: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
