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
:mod:`akka_optimize.plan.rules`.

Names the seeds describe without naming, chosen in their style (FEATURES.md "Gaps"):
``config.model.gradientCheckpointing``, ``hyperparams.training.seed``,
``hyperparams.training.maxSteps``, ``config.data.onTooLong``, ``execution.saveEverySteps``,
``execution.keepAdapters``, ``branchFrom``, ``warmStartModelId`` and the reinforcement
loop fields of ``rlHyperparams``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Group(BaseModel):
    """Base of every plan record: unknown fields refused, types strict."""

    model_config = ConfigDict(
        extra="forbid", strict=True, populate_by_name=False, allow_inf_nan=False
    )


SchedulerKind = Literal["constant", "linear", "cosine"]
Precision = Literal["fp32", "bf16"]
AttentionImplementation = Literal["sdpa", "eager", "flash_attention_2", "flex_attention"]


class LoraGroup(_Group):
    """``lora``: the adapter's shape (PEFT LoRA on the language model's linear layers)."""

    rank: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Rank r of each LoRA pair (A is r x in, B is out x r). Refused above the "
        "largest rank the deployment's endpoints load (`training endpoints info`).",
    )
    alpha: float | None = Field(
        None,
        gt=0,
        le=4096,
        description="LoRA alpha: the adapter's update is scaled by alpha / rank.",
    )
    dropout: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Dropout probability on the LoRA branch's input during training.",
    )


class OptimizerGroup(_Group):
    """``optimizer``: what performs the update. It has no betas or epsilon (seeds/000
    "Not in this release")."""

    kind: Literal["adamw"] | None = Field(
        None, description="The optimizer: `adamw` (decoupled weight decay)."
    )
    learningRate: float | None = Field(
        None, gt=0, le=1, description="Peak learning rate (absolute, after warmup)."
    )
    weightDecay: float | None = Field(
        None, ge=0, le=1, description="Decoupled weight decay applied to the adapter's weights."
    )
    maxGradNorm: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="Clip the global gradient L2 norm to this value; 0 turns clipping off.",
    )


class SchedulerGroup(_Group):
    """``scheduler``: how the learning rate moves over the run's updates."""

    kind: SchedulerKind | None = Field(
        None, description="Shape after warmup: `constant`, `linear` or `cosine` decay."
    )
    warmupRatio: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Fraction of all updates spent warming up linearly from 0 to the peak.",
    )
    minLearningRateRatio: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The last update's learning rate as a fraction of the peak "
        "(`linear` and `cosine`).",
    )


class TrainingGroup(_Group):
    """``hyperparams.training``: the supervised loop."""

    epochs: int | None = Field(
        None, ge=1, le=1000, description="Passes over the whole training dataset."
    )
    microBatchPerGpu: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Conversations in one forward pass on one device. Unset with "
        "`config.data.use_dynamic_bsz: false` it is 1.",
    )
    gradientAccumulation: int | None = Field(
        None, ge=1, le=4096, description="Forward/backward passes per optimizer update."
    )
    validationFrequencySteps: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Evaluate on the validation dataset every N updates; 0 never on a step "
        "count. Needs `config.data.validationDataset`.",
    )
    validateEachEpoch: bool | None = Field(
        None,
        description="Also evaluate on the whole validation dataset before the first update "
        "and at the end of each epoch.",
    )
    validationBatchSize: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Validation conversations per call on a supervised run on more than one "
        "device; null is the number of conversations in one update. Refused without a "
        "validation dataset.",
    )
    tokensPerGpu: int | None = Field(
        None,
        ge=1,
        le=16_777_216,
        description="Token budget of one pass on one device (supervised run on more than one "
        "device); at most the qualified limit of the base model's catalog entry.",
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=2**32 - 1,
        description="Seeds adapter initialisation, dropout and the per-epoch shuffle.",
    )
    maxSteps: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Stop after this many updates; null trains every epoch to the end.",
    )


class SupervisedHyperparams(_Group):
    """``hyperparams``: the four groups of a supervised run."""

    lora: LoraGroup | None = Field(None, description="The adapter's shape.")
    optimizer: OptimizerGroup | None = Field(None, description="What performs the update.")
    scheduler: SchedulerGroup | None = Field(None, description="How the learning rate moves.")
    training: TrainingGroup | None = Field(None, description="The supervised loop.")


class ReinforcementHyperparams(_Group):
    """``rlHyperparams``: ``lora``, ``optimizer`` and ``scheduler`` beside the reinforcement
    loop's own fields (seeds/000 "Training parameters"; the loop fields follow the
    group-relative loop of DATA-AND-TRAINING-RULES.md 1.2)."""

    lora: LoraGroup | None = Field(None, description="The adapter's shape.")
    optimizer: OptimizerGroup | None = Field(None, description="What performs the update.")
    scheduler: SchedulerGroup | None = Field(None, description="How the learning rate moves.")
    steps: int | None = Field(
        None, ge=1, le=1_000_000, description="Updates to run; one update per prompt batch."
    )
    promptsPerStep: int | None = Field(
        None, ge=1, le=65536, description="Prompts sampled for one update."
    )
    samplesPerPrompt: int | None = Field(
        None,
        ge=2,
        le=1024,
        description="Completions sampled per prompt; advantages are computed within the group.",
    )
    maxNewTokens: int | None = Field(
        None, ge=1, le=131072, description="Longest completion sampled, in tokens."
    )
    temperature: float | None = Field(
        None, gt=0, le=10, description="Sampling temperature of the rollouts."
    )
    lossFn: Literal["importance_sampling", "ppo", "cispo", "dro"] | None = Field(
        None, description="Policy loss over the sampled completions."
    )
    reward: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description="The grader: `bundle:REFERENCE#MODULE[:FUNCTION]`, `model:REFERENCE`, or "
        "`builtin:math` (the \\boxed{} answer against the prompt's gold answer).",
    )
    seed: int | None = Field(
        None, ge=0, le=2**32 - 1, description="Seeds adapter initialisation and sampling."
    )


class ModelGroup(_Group):
    """``config.model``: how the base model is loaded and trained."""

    precision: Precision | None = Field(
        None, description="Data type of the forward and backward computation."
    )
    weightPrecision: Precision | None = Field(
        None,
        description="Precision of the trained model's weights (a memory setting; part of the "
        "configuration hash).",
    )
    gradientCheckpointing: bool | None = Field(
        None,
        description="Recompute each layer's activations in the backward pass: less memory, "
        "about a third more compute.",
    )
    attentionImplementation: AttentionImplementation | None = Field(
        None,
        description="Attention kernel. `flex_attention` is for Gemma 4 E2B, E4B and 12B on a "
        "supervised run on more than one device only.",
    )


class DataGroup(_Group):
    """``config.data``: validation data and how conversations fill a pass."""

    validationDataset: str | None = Field(
        None,
        min_length=1,
        max_length=400,
        description="Registry reference of the validation dataset, pinned like `dataset`.",
    )
    use_dynamic_bsz: bool | None = Field(
        None,
        description="Pack each pass with whole conversations up to a token budget (true: "
        "best-fit decreasing, `maxSeqLength` tokens on one device; an update still holds "
        "microBatchPerGpu × gradientAccumulation conversations) or train one conversation "
        "per pass (false; microBatchPerGpu above 1 is then refused). The loss is the same.",
    )
    packing: bool | None = Field(
        None,
        description="Refused on a supervised run: on one device `use_dynamic_bsz` decides "
        "packing (true: whole conversations best-fit decreasing up to `maxSeqLength` tokens "
        "per pass; false: one conversation per pass); `true` on more than one device is "
        "refused because the run packs already (or trains one conversation per pass where "
        "use_dynamic_bsz is false).",
    )
    onTooLong: Literal["refuse", "drop"] | None = Field(
        None,
        description="A conversation longer than maxSeqLength: `refuse` fails preparation "
        "naming the row; `drop` leaves it out and reports how many were dropped.",
    )


class LossGroup(_Group):
    """``config.loss``: which tokens the supervised loss covers (seeds/000 "Conversations
    and tool calls as training data")."""

    assistantTurns: Literal["all", "last"] | None = Field(
        None, description="Train on every assistant turn (`all`) or only the last one."
    )
    trainOnToolCalls: bool | None = Field(
        None, description="Include the assistant's tool calls in the loss."
    )
    trainOnToolResults: bool | None = Field(
        None, description="Include tool messages (the results of tool calls) in the loss."
    )


class RunConfig(_Group):
    """``config``: what trains, on which data, and how."""

    dataset: str = Field(
        min_length=1,
        max_length=400,
        description="Registry reference of the training dataset (`triage/train`, "
        "`triage/train:v3`, `train` in the project's namespace); pinned when accepted.",
    )
    method: Literal["sft", "rl"] = Field(
        description="`sft` (supervised, reads `hyperparams`) or `rl` (reinforcement, reads "
        "`rlHyperparams`)."
    )
    hyperparams: SupervisedHyperparams | None = Field(
        None, description="Supervised groups: lora, optimizer, scheduler, training."
    )
    rlHyperparams: ReinforcementHyperparams | None = Field(
        None, description="Reinforcement groups: lora, optimizer, scheduler and loop fields."
    )
    maxSeqLength: int | None = Field(
        None,
        ge=16,
        le=1_048_576,
        description="Longest conversation in tokens; at most the base model's context.",
    )
    model: ModelGroup | None = Field(None, description="How the base model is loaded.")
    data: DataGroup | None = Field(None, description="Validation data and pass filling.")
    loss: LossGroup | None = Field(None, description="Which tokens the loss covers.")
    engineSettings: dict[str, Any] | None = Field(
        None,
        description="The training engine's settings by dotted key (see "
        "`config-schema --field config.engineSettings`), when the deployment allows them. "
        "Not on a supervised run on one device.",
    )


class OffloadGroup(_Group):
    """``execution.memory.offload``: what moves to host memory."""

    weights: bool | None = Field(
        None, description="Move the weights to host memory between passes."
    )
    optimizer: bool | None = Field(
        None, description="Keep optimizer state in host memory between updates."
    )
    activations: bool | None = Field(
        None, description="Store activations in host memory until the backward pass."
    )


class MemoryGroup(_Group):
    """``execution.memory``: memory settings (seeds/001 "Choose a run's memory settings")."""

    offload: OffloadGroup | None = Field(None, description="Host-memory offload.")
    sharding: Literal["full", "none"] | None = Field(
        None,
        description="`full` shards training state across devices; `none` keeps a complete "
        "copy of the model on each device and saves one copy of training state.",
    )


class RolloutGroup(_Group):
    """``execution.rollout``: the reinforcement run's rollout engine."""

    memoryShare: float | None = Field(
        None, gt=0, lt=1, description="Share of each device the rollout engine takes."
    )


class ExecutionGroup(_Group):
    """``execution``: where and how the run executes."""

    gpus: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Devices the run claims on one node (the CPU counts as one device).",
    )
    deviceProfile: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="The accelerator to train on, one the deployment declares; unset uses "
        "the deployment's default.",
    )
    hostMemoryGiB: float | None = Field(
        None, gt=0, le=1_000_000, description="Host memory the run's loader needs, in GiB."
    )
    engine: Literal["transformers"] | None = Field(
        None,
        description="The training engine: `transformers` (PyTorch, Transformers and PEFT; "
        "torchrun on several devices).",
    )
    keepRecoverable: int | None = Field(
        None, ge=1, le=100, description="Newest saves kept resumable (training state)."
    )
    keepAdapters: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Newest saved adapters kept; epoch adapters do not count.",
    )
    saveEverySteps: int | None = Field(
        None,
        ge=0,
        le=10_000_000,
        description="Save training state and adapter every N updates; 0 saves only at the end.",
    )
    saveEachEpoch: bool | None = Field(
        None, description="Also save, and keep the adapter, at the end of each epoch."
    )
    memory: MemoryGroup | None = Field(None, description="Memory settings.")
    rollout: RolloutGroup | None = Field(None, description="Rollout engine settings (rl).")


class BranchFrom(_Group):
    """``branchFrom``: start from a snapshot of another run (seeds/000 "Parameter sweeps")."""

    run: str = Field(min_length=1, max_length=64, description="The source run's ID.")
    snapshot: str = Field(
        min_length=1, max_length=64, description="The snapshot to start from, e.g. step-4000."
    )


class SmokeCheckGroup(_Group):
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


class RunPlan(_Group):
    """A run descriptor: ``POST /v1/training/runs`` and ``training runs start -f PLAN``."""

    kind: Literal["run"] = Field(description="Always `run` for a run descriptor.")
    project: str = Field(
        min_length=1,
        max_length=100,
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
        description="Model version reference the run starts from instead of the base model "
        "(reinforcement after supervised).",
    )
    branchFrom: BranchFrom | None = Field(
        None, description="Start from another run's snapshot instead of the base model."
    )
    config: RunConfig = Field(description="What trains, on which data, and how.")
    execution: ExecutionGroup | None = Field(None, description="Where and how the run executes.")
