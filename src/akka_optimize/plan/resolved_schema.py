"""The resolved plan as typed records: every field required, none with a default.

:func:`akka_optimize.plan.resolve.build_resolved` fills every field of the loop that runs
(:mod:`akka_optimize.plan.defaults`, the deployment, the catalog); a run keeps that
descriptor as JSON (``runs get --settings``). :func:`typed_plan` reads it back into
:class:`ResolvedRunPlan`, so what a run trains under (the engine's settings,
:mod:`akka_optimize.jobs.mapping`) is read through attributes a type checker and this
module check, never through a string key with a fallback of its own: a field the
resolver stops writing, or writes under another name, is refused here naming it instead
of training on a default nobody chose (issue 49 item 3).

Where a field is null in the resolved plan it is declared ``X | None`` with no default
(``validationBatchSize``, ``execution.memory`` on one device); the loop that does not run
has no group (``hyperparams`` of a reinforcement run), which :class:`ResolvedConfig`
checks against ``method``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ..errors import InvalidRequest
from .schema.base import AttentionImplementation, Precision, SchedulerKind


class _Resolved(BaseModel):
    """Base of every resolved group: unknown fields refused (a renamed field is named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ResolvedLora(_Resolved):
    """``lora`` resolved: rank r, alpha (the update is scaled by alpha / r), dropout."""

    rank: int
    alpha: float
    dropout: float


class ResolvedOptimizer(_Resolved):
    """``optimizer`` resolved (AdamW; learning rate absolute, weight decay decoupled)."""

    kind: Literal["adamw"]
    learningRate: float
    weightDecay: float
    maxGradNorm: float


class ResolvedScheduler(_Resolved):
    """``scheduler`` resolved: shape after warmup and its two ratios (fractions of 1)."""

    kind: SchedulerKind
    warmupRatio: float
    minLearningRateRatio: float


class ResolvedTraining(_Resolved):
    """``hyperparams.training`` resolved (the supervised loop; counts of updates, passes,
    conversations and tokens)."""

    epochs: int
    microBatchPerGpu: int
    gradientAccumulation: int
    validationFrequencySteps: int
    validateEachEpoch: bool
    validationBatchSize: int | None
    tokensPerGpu: int | None
    seed: int
    maxSteps: int | None


class ResolvedSupervised(_Resolved):
    """``config.hyperparams`` of a supervised run, every group filled."""

    lora: ResolvedLora
    optimizer: ResolvedOptimizer
    scheduler: ResolvedScheduler
    training: ResolvedTraining


class ResolvedReinforcement(_Resolved):
    """``config.rlHyperparams`` of a reinforcement run, every field filled."""

    lora: ResolvedLora
    optimizer: ResolvedOptimizer
    scheduler: ResolvedScheduler
    steps: int
    promptsPerStep: int
    samplesPerPrompt: int
    maxNewTokens: int
    temperature: float
    lossFn: Literal["importance_sampling", "ppo", "cispo", "dro", "gspo"]
    lossAggregation: Literal["token_mean", "sequence_mean", "dr_grpo"]
    advantageNormalization: Literal["population_std", "sample_std", "none"]
    rolloutCorrection: Literal["none", "truncated_is", "sequence_mask"]
    rolloutCorrectionCap: float
    maxStaleness: int
    reward: str
    seed: int


class ResolvedPreference(_Resolved):
    """``config.dpoHyperparams`` of a preference run (issue 50), every field filled
    (``lossWeights`` None: one weight of 1 per loss type)."""

    lora: ResolvedLora
    optimizer: ResolvedOptimizer
    scheduler: ResolvedScheduler
    beta: float
    lossTypes: list[Literal["sigmoid", "ipo"]]
    lossWeights: list[float] | None
    labelSmoothing: float
    epochs: int
    microBatchPerGpu: int
    gradientAccumulation: int
    validationFrequencySteps: int
    seed: int
    maxSteps: int | None


class ResolvedModel(_Resolved):
    """``config.model`` resolved (the device profile's kind decided the unstated ones)."""

    precision: Precision
    weightPrecision: Precision
    gradientCheckpointing: bool
    attentionImplementation: AttentionImplementation


class ResolvedData(_Resolved):
    """``config.data`` resolved; ``validationDataset`` pinned or None."""

    validationDataset: str | None
    use_dynamic_bsz: bool
    packing: bool
    onTooLong: Literal["refuse", "drop"]


class ResolvedLoss(_Resolved):
    """``config.loss`` resolved (supervised runs)."""

    assistantTurns: Literal["all", "last"]
    trainOnToolCalls: bool
    trainOnToolResults: bool


class ResolvedConfig(_Resolved):
    """``config`` resolved: the group of the loop that runs is present, the other absent.

    ``engineSettings`` holds every engine setting of the loop by dotted key (stated, the
    deployment's default, else the declared one: :data:`akka_optimize.engine_settings.
    SETTINGS`); it is empty on a supervised run on one device.
    """

    dataset: str
    method: str
    hyperparams: ResolvedSupervised | None = None
    rlHyperparams: ResolvedReinforcement | None = None
    dpoHyperparams: ResolvedPreference | None = None
    maxSeqLength: int
    model: ResolvedModel
    data: ResolvedData
    loss: ResolvedLoss | None
    engineSettings: dict[str, Any]

    @model_validator(mode="after")
    def _loop_group(self) -> ResolvedConfig:
        want = {"sft": "hyperparams", "rl": "rlHyperparams", "dpo": "dpoHyperparams"}.get(
            self.method
        )
        if want is not None and getattr(self, want) is None:
            raise ValueError(f"a {self.method} run's resolved plan has no config.{want}")
        return self


class ResolvedOffload(_Resolved):
    """``execution.memory.offload`` resolved."""

    weights: bool
    optimizer: bool
    activations: bool


class ResolvedMemory(_Resolved):
    """``execution.memory`` resolved (runs other than a supervised run on one device)."""

    offload: ResolvedOffload
    sharding: Literal["full", "none"]


class ResolvedRollout(_Resolved):
    """``execution.rollout`` resolved (reinforcement runs): share of one device, (0, 1)."""

    memoryShare: float


class ResolvedExecution(_Resolved):
    """``execution`` resolved; ``deviceProfile`` is the profile the run trains on."""

    gpus: int
    deviceProfile: str
    hostMemoryGiB: float | None
    engine: Literal["transformers"]
    keepRecoverable: int
    keepAdapters: int
    saveEverySteps: int
    saveEachEpoch: bool
    memory: ResolvedMemory | None
    rollout: ResolvedRollout | None


class ResolvedSmokeCheck(_Resolved):
    """``smokeCheck`` of a smoke run, resolved."""

    rows: int
    threshold: float
    maxSteps: int
    measureEverySteps: int


class ResolvedBranchFrom(_Resolved):
    """``branchFrom``: the source run and its snapshot."""

    run: str
    snapshot: str


class ResolvedRunPlan(BaseModel):
    """A run's resolved plan (:attr:`akka_optimize.plan.resolve.ResolvedPlan.plan`);
    ``modelName`` is ``project/name``.

    A run record keeps more beside the plan at this level (``stated``, ``settingsText``,
    ``claims`` and what its kind pinned), which this record leaves to their readers.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["run"]
    project: str
    baseModel: str
    modelName: str
    submissionId: str | None
    smoke: bool
    smokeCheck: ResolvedSmokeCheck | None
    warmStartModelId: str | None
    branchFrom: ResolvedBranchFrom | None
    config: ResolvedConfig
    execution: ResolvedExecution

    @property
    def method(self) -> str:
        """The loop that runs (``config.method``)."""
        return self.config.method


def typed_plan(resolved: dict[str, Any]) -> ResolvedRunPlan:
    """Read a resolved plan (JSON, as a run record keeps it) into :class:`ResolvedRunPlan`.

    Raises:
        InvalidRequest: a field is missing, unknown or of the wrong type (``field`` is its
            dotted path, code ``resolved_plan_invalid``): a run recorded under another
            version of the resolver, or a resolver that forgot a field.
    """
    try:
        return ResolvedRunPlan.model_validate(resolved)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(
            f"The run's resolved plan cannot be read at {path}: {first['msg']} "
            f"({exc.error_count()} problem(s)); resubmit the plan so it resolves again.",
            field=path,
            code="resolved_plan_invalid",
        ) from None
