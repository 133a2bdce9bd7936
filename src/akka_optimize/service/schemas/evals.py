"""Response schemas of evaluations, comparisons and curations (views in
:mod:`akka_optimize.evals.views` and :mod:`akka_optimize.evals.curation.kind`)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from .common import Progress, ProjectFields, View, iso_time


class ScoreSummary(View):
    """Scores of one model's answers."""

    mean: float | None = Field(description="Mean score over the scored examples.")
    stderr: float | None = Field(description="Standard error of the mean.")
    count: int | None = Field(description="Examples.")
    scored: int | None = Field(description="Examples scored.")
    errors: int | None = Field(description="Examples that failed.")
    errorShare: float | None = Field(description="errors / count.")


class Example(View):
    """One scored example: ``index``, ``prompt`` and per side its ``answer``, ``score``,
    ``details`` and ``error`` (suffixed A and B in a comparison)."""

    model_config = ConfigDict(extra="allow")
    index: int = Field(description="The example's 0-based index in the dataset.")


class RecordFields(ProjectFields):
    """What every evaluation-like record shows: its ID, state and times."""

    id: str = Field(description="Its ID (32 hex digits).")
    state: str = Field(description="QUEUED, STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED.")
    phase: str | None = Field(description="What it is doing now, in words.")
    queueReason: str | None = Field(description="Why a QUEUED one waits; null otherwise.")
    claims: Any = Field(description="The devices it claims, by pool.")
    limit: int | None = Field(description="At most this many examples, or null for all.")
    progress: Progress = Field(description="How far it is.")
    failureReason: str | None = Field(description="Why it failed: one sentence.")
    createdAt: str | None = iso_time("When it was accepted")
    startedAt: str | None = iso_time("When it started")
    finishedAt: str | None = iso_time("When it ended")


class EvaluationView(RecordFields):
    """An evaluation: one model's answers to a dataset's prompts, scored by a grader."""

    modelId: str | None = Field(description="The pinned model version.")
    model: str | None = Field(description="The model as given.")
    baseModel: str | None = Field(description="Its base model.")
    dataset: str | None = Field(description="The pinned dataset of prompts.")
    grader: str | None = Field(description="The grader as given (bundle:… or model:…).")
    bundle: str | None = Field(description="The pinned scoring bundle, or null for a judge.")
    graderInstructions: str | None = Field(description="A judge's instructions.")
    instructionsSource: str | None = Field(description="Where the instructions came from.")
    judge: str | None = Field(description="The pinned judge model (model: graders).")
    judgeEndpoint: str | None = Field(description="The judge's endpoint ID.")
    sampling: dict[str, Any] | None = Field(description="How answers are sampled.")
    results: ScoreSummary | None = Field(description="The scores once finished, or null.")
    maxErrorShare: float | None = Field(description="Largest share of failed examples.")
    examples: list[Example] | None = Field(None, description="Every example (examples=true).")


class EvaluationList(View):
    """Newest evaluations first."""

    evaluations: list[EvaluationView] = Field(description="The evaluations, newest first.")


class PairedStats(View):
    """One model against another, example by example."""

    wins: int | None = Field(description="Examples the candidate scored higher on.")
    losses: int | None = Field(description="Examples it scored lower on.")
    ties: int | None = Field(description="Examples both scored alike.")
    pairs: int | None = Field(description="Examples both sides scored.")
    errors: int | None = Field(description="Examples a side failed.")
    meanDifference: float | None = Field(description="Mean of candidate - baseline.")
    ci95: list[float] | None = Field(description="Its paired 95% interval [low, high].")


class PairedResults(PairedStats):
    """The candidate against the baseline, with each side's own scores."""

    candidate: ScoreSummary | None = Field(description="The candidate's own scores.")
    baseline: ScoreSummary | None = Field(description="The baseline's own scores.")


class FanRow(View):
    """One sweep branch's scores, best mean first."""

    run: str | None = Field(description="The branch run.")
    point: dict[str, Any] | None = Field(description="Its grid point.")
    model: str | None = Field(description="Its registered model version.")
    mean: float | None = Field(description="Mean score.")
    stderr: float | None = Field(description="Standard error of the mean.")
    count: int | None = Field(description="Examples.")
    errors: int | None = Field(description="Examples that failed.")
    vsSource: PairedStats | None = Field(description="Against the source snapshot.")


class SweepSides(View):
    """The sweep a comparison scores."""

    source: str | None = Field(description="The source run.")
    snapshot: str | None = Field(description="The source snapshot (step-N).")
    branches: list[str] = Field(description="The branch runs.")


class ComparisonView(EvaluationView):
    """A comparison: a candidate model against a baseline on the same prompts; or a sweep
    comparison (``sweep``, ``fan``): every branch against the source snapshot."""

    baselineModelId: str | None = Field(description="The pinned baseline model.")
    baselineModel: str | None = Field(description="The baseline as given.")
    results: PairedResults | None = Field(description="The comparison once finished.")  # type: ignore[assignment]
    mostDifferent: list[dict[str, Any]] | None = Field(
        description="The example pairs whose scores differ most: index, scoreA, scoreB, "
        "answerA, answerB."
    )
    sweep: SweepSides | None = Field(None, description="(sweep) What it compares.")
    source: ScoreSummary | None = Field(None, description="(sweep) The source's scores.")
    leftOut: list[dict[str, Any]] | None = Field(
        None, description="(sweep) Branches that did not succeed, with their state."
    )
    fan: list[FanRow] | None = Field(None, description="(sweep) Each branch, once scored.")


class ComparisonList(View):
    """Newest comparisons first."""

    comparisons: list[ComparisonView] = Field(description="The comparisons, newest first.")


class CurationResults(View):
    """What a curation kept."""

    count: int | None = Field(description="Rows judged.")
    scored: int | None = Field(description="Rows scored.")
    errors: int | None = Field(description="Rows the judge failed on.")
    kept: int | None = Field(description="Rows kept.")
    mean: float | None = Field(description="Mean judge score.")
    stderr: float | None = Field(description="Standard error of the mean.")


class CurationOutputs(View):
    """The datasets a curation registered."""

    dataset: str | None = Field(description="The kept rows, pinned.")
    judgeDataset: str | None = Field(description="Every row with its judgement, pinned.")


class CurationView(RecordFields):
    """A curation: a judge scores a dataset's rows and keeps the good ones."""

    source: str | None = Field(description="The pinned source dataset.")
    dataset: str | None = Field(description="The name the kept rows register under.")
    judgeDataset: str | None = Field(description="The name the judged rows register under.")
    judge: str | None = Field(description="The pinned judge model.")
    judgeModel: str | None = Field(description="The judge's served name.")
    judgeInstructions: str | None = Field(description="The instructions given to the judge.")
    instructionsSource: str | None = Field(description="Where the instructions came from.")
    judgeEndpoint: str | None = Field(description="The judge's endpoint ID.")
    keep: Any = Field(description="Which rows are kept (a score threshold).")
    results: CurationResults | None = Field(description="What it kept, once finished.")
    outputs: CurationOutputs | None = Field(
        description="The datasets it registered, once finished."
    )


class CurationList(View):
    """Newest curations first."""

    curations: list[CurationView] = Field(description="The curations, newest first.")
