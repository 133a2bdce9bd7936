"""The run descriptor: every field a run plan may state, documented where it is declared.

Source: seeds/000 "Training parameters" (groups ``lora``, ``optimizer``, ``scheduler``,
``training``; ``rlHyperparams``; ``model``), "H100 support" (``execution.deviceProfile``,
``hostMemoryGiB``), breaking changes (old shapes refused); seeds/001 "Choose a run's
memory settings", "Set the training engine's settings directly", "Flex attention for
Gemma 4", "Resume from one of several saves", "Keep an adapter for each epoch",
"Validate before training and at each epoch", "Other changes" (``tokensPerGpu``,
``data.packing``, ``validationBatchSize``).

Every model forbids unknown fields (``extra="forbid"``) and is strict about types
(``"16"`` is not a rank). A field left out, or stated as ``null``, takes the default of
the loop that runs (:mod:`akka_optimize.plan.defaults`); this module only declares
shapes and schema bounds. Ceilings that depend on the deployment or on the base model
(serving rank, device memory, qualified token limit) are checked in
:mod:`akka_optimize.plan.rules.check`.

Names the seeds describe without naming, chosen in their style (FEATURES.md "Gaps"):
``config.model.gradientCheckpointing``, ``hyperparams.training.seed``,
``hyperparams.training.maxSteps``, ``config.data.onTooLong``, ``execution.saveEverySteps``,
``execution.keepAdapters``, ``branchFrom``, ``warmStartModelId`` and the reinforcement
loop fields of ``rlHyperparams``.

This module owns the top-level record (:class:`RunPlan`, with ``branchFrom`` and
``smokeCheck``); the groups are declared in :mod:`.schema_hyperparams`,
:mod:`.schema_config` and :mod:`.schema_execution` on the base of :mod:`.schema_base`,
and every one of them stays importable from here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...refs import NAME_PATTERN
from .base import REFERENCE, Group, documented
from .config import RunConfig as RunConfig
from .execution import ExecutionGroup as ExecutionGroup


class BranchFrom(Group):
    """``branchFrom``: start from a snapshot of another run (seeds/000 "Parameter sweeps")."""

    run: str = Field(min_length=1, max_length=64, description="The source run's ID.")
    snapshot: str = Field(
        min_length=1, max_length=64, description="The snapshot to start from, e.g. step-4000."
    )


class SmokeCheckGroup(Group):
    """``smokeCheck``: the slice and the reading of a smoke run (``smoke: true``;
    :mod:`akka_optimize.engine.smoke`)."""

    rows: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Conversations in the slice a smoke run trains: the dataset's first "
        "rows, in file order (default 8).",
    )
    threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Greedy token accuracy over the whole slice's supervised tokens that "
        "ends the check with reading REPRODUCED (default 0.9).",
    )
    maxSteps: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Updates at most; a check that stops there below the threshold "
        "reports UNSTABLE_READING and fails (default 100).",
    )
    measureEverySteps: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Updates between two readings of the slice; the last update is always "
        "read (default 5).",
    )


class RunPlan(Group):
    """A run descriptor: ``POST /v1/training/runs`` and ``training runs start -f PLAN``."""

    kind: Literal["run"] = Field(description="Always `run` for a run descriptor.")
    project: str = Field(
        min_length=1,
        max_length=100,
        json_schema_extra=documented(NAME_PATTERN),
        description="The training project; the namespace of its models and of unqualified "
        "references.",
    )
    baseModel: str = Field(
        min_length=1,
        max_length=200,
        description="Hub repository of the base model, one the deployment's catalog allows "
        "(e.g. HuggingFaceTB/SmolLM2-135M-Instruct).",
    )
    modelName: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        json_schema_extra=documented(NAME_PATTERN),
        description="Named model the run registers under in the project's namespace; "
        "defaults to the base model's name.",
    )
    submissionId: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Idempotency key: resubmitting with the same ID in the project returns "
        "the first run.",
    )
    smoke: bool | None = Field(
        None,
        description="A smoke run: a short check that the plan trains, not a full run. It "
        "trains the first smokeCheck.rows conversations until greedy decoding reproduces "
        "them (smokeCheck.threshold), reports the reading and registers no model.",
    )
    smokeCheck: SmokeCheckGroup | None = Field(
        None, description="The slice and threshold of a smoke run (needs smoke: true)."
    )
    warmStartModelId: str | None = Field(
        None,
        min_length=1,
        max_length=400,
        json_schema_extra=documented(REFERENCE),
        description="Model version reference the run starts from instead of the base model "
        "(reinforcement after supervised).",
    )
    branchFrom: BranchFrom | None = Field(
        None, description="Start from another run's snapshot instead of the base model."
    )
    config: RunConfig = Field(description="What trains, on which data, and how.")
    execution: ExecutionGroup | None = Field(None, description="Where and how the run executes.")
