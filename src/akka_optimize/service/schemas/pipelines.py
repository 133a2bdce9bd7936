"""Response schemas of pipelines (``/v1/training/pipelines``; views in
:mod:`akka_optimize.core.pipelines.views` and :mod:`akka_optimize.core.pipelines.records`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import ProjectFields, View, iso_time


class StageView(View):
    """One stage of a pipeline."""

    index: int = Field(description="Its place (0-based).")
    name: str = Field(description="The stage's name.")
    kind: str = Field(description="train, evaluate or curate.")
    state: str = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED…")
    job: str | None = Field(description="The job (run, evaluation…) running it.")
    jobConfigHash: str | None = Field(description="The job's configuration hash.")
    earlierJobs: list[str] = Field(description="Jobs of earlier tries (after a resume).")
    output: Any = Field(
        description="What it produced once done: train the pinned model, curate the kept "
        "dataset, evaluate {mean, stderr, count}."
    )
    configHash: str = Field(description="sha256 of its resolved settings.")
    settings: dict[str, Any] | None = Field(
        None, description="Its resolved settings (not in lists)."
    )
    failureReason: str | None = Field(description="Why it failed.")


class PipelineView(ProjectFields):
    """A pipeline: its state, configuration and stages."""

    id: str = Field(description="The pipeline's ID (32 hex digits).")
    state: str = Field(description="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED.")
    submissionId: str | None = Field(description="The client's idempotency key.")
    configHash: str = Field(description="sha256 of the project and every stage's settings.")
    stages: list[StageView] = Field(description="Its stages, in order.")
    failureReason: str | None = Field(description="Why it failed: one sentence.")
    createdAt: str | None = iso_time("When it was accepted")
    finishedAt: str | None = iso_time("When it ended")


class PipelineList(View):
    """Newest pipelines first (stages without settings)."""

    pipelines: list[PipelineView] = Field(description="The pipelines, newest first.")


class DryRunStage(View):
    """One stage as a start would resolve it."""

    index: int = Field(description="Its place (0-based).")
    name: str = Field(description="The stage's name.")
    kind: str = Field(description="train, evaluate or curate.")
    configHash: str = Field(description="sha256 of its resolved settings.")
    settings: dict[str, Any] = Field(description="Its resolved settings.")


class PipelineDryRun(View):
    """Every stage's resolved settings (``dryRun=true``); nothing is created."""

    accepted: bool = Field(description="Always true (a refusal is an error).")
    project: str = Field(description="The project it would belong to.")
    submissionId: str | None = Field(description="The client's idempotency key, or null.")
    configHash: str = Field(description="sha256 of the project and every stage's settings.")
    stages: list[DryRunStage] = Field(description="Every stage, in order.")
