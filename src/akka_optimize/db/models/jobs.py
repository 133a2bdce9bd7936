"""Runs, their attempts, the events workers stream back, and saved snapshots."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


class Run(Base):
    """One training run: its frozen settings, state, results and registered model."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("project", "submission_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), index=True)
    submission_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    method: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), index=True)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    resolved: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_hash: Mapped[str] = mapped_column(String(64))
    base_model: Mapped[str] = mapped_column(String(256))
    dataset: Mapped[str] = mapped_column(String(256))
    validation_dataset: Mapped[str | None] = mapped_column(String(256), nullable=True)
    model_name: Mapped[str] = mapped_column(String(256))
    device_kind: Mapped[str] = mapped_column(String(16))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    queue_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    phase_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    control: Mapped[str | None] = mapped_column(String(16), nullable=True)
    resume_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    failure_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    current_step: Mapped[int] = mapped_column(Integer, default=0)
    last_saved_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    registered_model: Mapped[str | None] = mapped_column(String(256), nullable=True)
    results: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    device_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class RunAttempt(Base):
    """One worker process of a run (a resume or a retry is a new attempt)."""

    __tablename__ = "run_attempts"
    __table_args__ = (UniqueConstraint("run_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    executor: Mapped[str] = mapped_column(String(16), default="local")
    device: Mapped[str] = mapped_column(String(32), default="cpu")
    resume_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    token_sha256: Mapped[str] = mapped_column(String(64))
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_event_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RunMetric(Base):
    """A metrics or validation record of one update, as the worker reported it."""

    __tablename__ = "run_metrics"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    step: Mapped[int] = mapped_column(Integer)
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Snapshot(Base):
    """A save: training state (resumable while kept) and the adapter at that step."""

    __tablename__ = "run_snapshots"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    epoch_end: Mapped[bool] = mapped_column(default=False)
    state_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    adapter_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    state_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    adapter_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    recoverable: Mapped[bool] = mapped_column(default=True)
    model_version: Mapped[str | None] = mapped_column(String(256), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Pipeline(Base):
    """One pipeline: its checked descriptor, its stages' progress and its state
    (:mod:`akka_optimize.core.pipelines.records`)."""

    __tablename__ = "pipelines"
    __table_args__ = (UniqueConstraint("project", "submission_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), index=True)
    submission_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    descriptor: Mapped[dict[str, Any]] = mapped_column(JSON)
    stages: Mapped[list[Any]] = mapped_column(JSON)
    config_hash: Mapped[str] = mapped_column(String(64))
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
