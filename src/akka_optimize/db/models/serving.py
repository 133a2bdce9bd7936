"""Tables of the serving concern: endpoints and the model versions each serves (issue 8)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


class Endpoint(Base):
    """An endpoint: a resident base model serving itself or adapters of it.

    ``state`` is ``QUEUED``, ``STARTING``, ``READY``, ``STOPPED`` (idle; restarts on the
    next request) or ``FAILED`` (``error`` says why); ``activity`` is what the model is
    doing while it starts. ``base_model`` is the pinned base-model version.
    """

    __tablename__ = "endpoints"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), index=True)
    state: Mapped[str] = mapped_column(String(16), default="QUEUED")
    activity: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    base_model: Mapped[str] = mapped_column(String(512))
    engine: Mapped[str] = mapped_column(String(16), default="transformers")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_request_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    queued_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    """When its latest start was requested: its place in its pool's queue (issue 22)."""


class EndpointModel(Base):
    """One model version an endpoint serves; ``served_name`` is the OpenAI ``model``.

    ``kind`` is ``base`` or ``adapter``; ``checks`` holds the post-deploy check of an
    adapter (behaviours.md 7).
    """

    __tablename__ = "endpoint_models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint_id: Mapped[str] = mapped_column(
        ForeignKey("endpoints.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    ref: Mapped[str] = mapped_column(String(512))
    pinned: Mapped[str] = mapped_column(String(512))
    served_name: Mapped[str] = mapped_column(String(512))
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    instructions: Mapped[str | None] = mapped_column(Text, nullable=True)
    checks: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
