"""Tables of the catalog concern: base-model selections.

A selection moves ``PENDING`` → ``FETCHING`` → ``READY`` or ``FAILED`` (seeds/000 "Base
model flexibility": a selection is not ``READY`` until its weights are in the shared
weights cache). One row per repository (``repository_key``, lower case): selecting
again returns the same row, and re-selecting a ``FAILED`` one starts a new attempt.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


class BaseModelSelection(Base):
    """A base model selected from the catalog, and where its weights are.

    Attributes:
        id: 32 hex digits; commands accept an unambiguous prefix (seeds/001).
        repository: the catalog's spelling (``Qwen/Qwen3-0.6B``).
        repository_key: lower case, unique (``qwen/qwen3-0.6b``).
        state: ``PENDING``, ``FETCHING``, ``READY`` or ``FAILED``.
        commit: the source's commit (hub commit, or a SHA-256 prefix of a GGUF file).
        model: the registered version (``qwen/qwen3-0.6b:v1``) once ``READY``.
        weights_path: the model directory in the weights cache.
        progress: the latest progress line of the fetch.
        error: one sentence when ``FAILED``.
        attempts: how many fetches (or conversions) were started for this row.
    """

    __tablename__ = "base_model_selections"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    repository: Mapped[str] = mapped_column(String(256))
    repository_key: Mapped[str] = mapped_column(String(256), unique=True, index=True)
    state: Mapped[str] = mapped_column(String(16), default="PENDING")
    commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    model: Mapped[str | None] = mapped_column(String(300), nullable=True)
    weights_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    progress: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
    ready_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
