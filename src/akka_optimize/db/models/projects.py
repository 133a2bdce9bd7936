"""Training projects (seeds/001 "Workloads are training projects")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


class Project(Base):
    """A training project: its name is the registry namespace of its models."""

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True, index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    evaluation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The project's evaluation settings (``dataset``, ``grader``, ``graderInstructions``,
    ``autoEvaluate``; :mod:`akka_optimize.evals.settings`), None until set."""
