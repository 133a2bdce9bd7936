"""Response schemas of projects, base models, capacity and the service's info
(``/v1/training/projects``, ``…/base-models``, ``…/capacity``, ``…/info``, ``/healthz``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import View, iso_time


class LastQueued(View):
    """The evaluation queued for the newest registered model version."""

    model: str = Field(description="The registered version (NAME:vN).")
    at: str = Field(description="When (ISO 8601).")
    evaluationId: str | None = Field(None, description="The evaluation queued.")
    error: str | None = Field(None, description="Why none could be queued.")


class EvaluationSettingsView(View):
    """A project's evaluation settings, pinned when set."""

    dataset: str | None = Field(description="The pinned dataset of prompts.")
    grader: str | None = Field(description="The grader as given (bundle:… or model:…).")
    bundle: str | None = Field(description="The pinned scoring bundle, or null for a judge.")
    graderInstructions: str | None = Field(description="A judge's instructions.")
    instructionsSource: str | None = Field(description="Where the instructions came from.")
    sampling: dict[str, Any] | None = Field(description="How answers are sampled.")
    autoEvaluate: bool = Field(description="Whether new model versions are evaluated.")
    setAt: str | None = iso_time("When they were set")
    lastQueued: LastQueued | None = Field(description="The evaluation queued last, or null.")


class ProjectView(View):
    """A training project."""

    id: str = Field(description="The project's ID (32 hex digits).")
    name: str = Field(description="Its name; it cannot change.")
    createdAt: str | None = iso_time("When it was created")
    evaluation: EvaluationSettingsView | None = Field(description="Its evaluation settings.")


class ProjectList(View):
    """Every project the caller sees, by name."""

    projects: list[ProjectView] = Field(description="The projects, by name.")


class ModelScore(View):
    """One model's newest score on the project's evaluation settings."""

    model: str = Field(description="The model as evaluated.")
    modelId: str = Field(description="The pinned model version.")
    source: str | None = Field(description="base or adapter.")
    mean: float | None = Field(description="Mean score.")
    stderr: float | None = Field(description="Standard error of the mean.")
    count: int | None = Field(description="Examples scored.")
    errors: int | None = Field(description="Examples that failed.")
    evaluationId: str = Field(description="The evaluation that measured it.")
    finishedAt: str | None = iso_time("When it finished")


class ScoreRow(View):
    """One base-model version and its models, best mean first."""

    baseModel: str = Field(description="The pinned base-model version.")
    repository: str | None = Field(description="Its hub repository.")
    models: list[ModelScore] = Field(description="Its models, best mean first.")


class ScoresTable(View):
    """A project's scores table."""

    project: str = Field(description="The project's name.")
    dataset: str | None = Field(description="The pinned dataset scored on.")
    grader: str | None = Field(description="The grader.")
    sampling: dict[str, Any] | None = Field(description="How answers were sampled.")
    rows: list[ScoreRow] = Field(description="One row per base-model version.")


class BaseModelView(View):
    """A catalog entry and its selection (seeds/001 "Base model listing")."""

    id: str | None = Field(description="The selection's ID; null when not selected.")
    repository: str = Field(description="The hub repository.")
    model: str = Field(description="The registered version, or repository@commit.")
    selected: bool = Field(
        description="Whether it is selected (its weights fetched or being fetched)."
    )
    state: str | None = Field(description="PENDING, DOWNLOADING, READY or FAILED.")
    cached: bool = Field(description="Whether its weights are in the cache.")
    default: bool = Field(description="Whether it is the catalog's default.")
    family: str | None = Field(description="The model family (gemma3, qwen3, llama…).")
    modelType: str | None = Field(description="The transformers model type.")
    source: str = Field(description="Where weights come from (hub, gguf, tiny…).")
    commit: str | None = Field(description="The pinned commit.")
    weightsPath: str | None = Field(description="Where its weights are cached.")
    progress: str | None = Field(description="The latest progress line of the download.")
    error: str | None = Field(description="Why it failed or cannot be pinned.")
    attempts: int = Field(description="Download attempts.")
    envelope: dict[str, dict[str, Any]] = Field(
        description="Device profile → qualifiedTokens, memoryGiB, measured, verifiedKernels."
    )
    selectedAt: str | None = iso_time("When it was selected")
    readyAt: str | None = iso_time("When its weights were ready")


class BaseModelList(View):
    """Selected base models (or every catalog entry with all=true)."""

    baseModels: list[BaseModelView] = Field(description="The base models, in catalog order.")
    catalog: str | None = Field(description="Where the catalog was read from.")


class Candidate(View):
    """A hub repository and whether the catalog could allow it."""

    repository: str | None = Field(description="The hub repository.")
    modelType: str | None = Field(description="Its transformers model type.")
    parameters: int | None = Field(description="Parameter count, when the hub says.")
    commit: str | None = Field(description="Its newest commit.")
    verdict: str = Field(description="supported, or why not.")
    reason: str | None = Field(description="Why it is not supported, or null.")


class CandidateList(View):
    """Hub repositories matching a search, with catalog entries for the supported ones."""

    author: str | None = Field(description="The hub author searched.")
    match: str | None = Field(description="The name filter, or null.")
    candidates: list[Candidate] = Field(description="One row per matching repository.")
    catalogYaml: str = Field(description="YAML catalog entries for supported ones, or ''.")


class PoolView(View):
    """A device pool's declared and observed devices and their use."""

    name: str = Field(description="The pool's name.")
    deviceProfile: str = Field(description="The device profile of its devices.")
    kind: str = Field(description="cpu or cuda.")
    nodes: int = Field(description="Nodes in the pool.")
    devicesPerNode: int = Field(description="Devices on each node.")
    declared: int = Field(description="nodes × devicesPerNode.")
    observed: int = Field(description="Devices of its kind this machine sees.")
    inUse: int = Field(description="Devices held now.")
    waiting: int = Field(description="Items waiting for this pool.")


class CapacityItem(View):
    """A run, evaluation or endpoint holding or waiting for devices."""

    kind: str = Field(description="run or endpoint.")
    id: str = Field(description="The run's or endpoint's ID.")
    method: str | None = Field(description="A run's method (sft, rl, eval…); null for an endpoint.")
    state: str = Field(description="Its state.")
    projectId: str | None = Field(description="Its project's ID; null when the project is gone.")
    projectName: str = Field(description="Its project's name.")
    devices: dict[str, int] = Field(description="Pool → devices claimed.")
    judged: bool = Field(description="Whether part of the claim is a judge endpoint.")
    since: str = Field(description="When it began holding or waiting (ISO 8601).")
    position: int | None = Field(None, description="(waiting) Its place in the queue.")
    of: int | None = Field(None, description="(waiting) How many wait.")
    pool: str | None = Field(None, description="(waiting) The pool it waits for.")
    reason: str | None = Field(None, description="(waiting) Why it waits.")


class ProjectCapacity(View):
    """One project's use against its quota."""

    projectId: str | None = Field(description="The project's ID; null when it is gone.")
    projectName: str = Field(description="The project's name.")
    usage: dict[str, int] = Field(description="Pool → devices held.")
    quota: dict[str, int] = Field(description="Pool → its quota (pools with one).")
    holding: list[CapacityItem] = Field(description="What holds devices now.")
    waiting: list[CapacityItem] = Field(
        description="What waits for devices, with its place and reason."
    )


class EndpointClaim(View):
    """What one endpoint claims."""

    pool: str = Field(description="The pool endpoints run on.")
    devices: int = Field(description="Devices each endpoint claims from it.")


class CapacityReport(View):
    """Pools, quotas, and what holds or waits for devices."""

    pools: list[PoolView] = Field(description="Every device pool.")
    endpointClaim: EndpointClaim = Field(description="The pool and devices of each endpoint.")
    projects: list[ProjectCapacity] = Field(
        description="Each project's use (only the caller's, for a project token)."
    )


class Health(View):
    """Liveness."""

    status: str = Field(description="ok.")


class StateStore(View):
    """The state store."""

    kind: str = Field(description="sqlite or postgresql.")
    url: str | None = Field(description="Its URL, password hidden (null to a project token).")


class BlobStore(View):
    """The blob store."""

    url: str | None = Field(description="Its URL, credentials hidden (null to a project token).")


class TrainingInfo(View):
    """Build version, state store, blob store and whether start-up completed."""

    version: str = Field(description="The service's build version.")
    stateStore: StateStore = Field(description="Where runs, versions and tokens are kept.")
    blobStore: BlobStore = Field(description="Where files (datasets, adapters, saves) are kept.")
    home: str | None = Field(description="The service's home folder (null to a project token).")
    startedCompletely: bool = Field(description="Whether start-up has completed.")
    startupError: str | None = Field(description="Why start-up failed, or null.")
