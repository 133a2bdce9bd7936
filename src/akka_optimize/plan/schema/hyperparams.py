"""The hyperparameter groups of a run plan: ``lora``, ``optimizer``, ``scheduler``,
``training`` and the two loop records that hold them, ``hyperparams`` (supervised) and
``rlHyperparams`` (reinforcement).

Source: seeds/000 "Training parameters"; seeds/001 "Other changes" (``tokensPerGpu``,
``validationBatchSize``), "Validate before training and at each epoch". Shapes and schema
bounds only; :mod:`akka_optimize.plan.rules.check` checks the ceilings that depend on the
deployment or the base model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...refs import GRADER_PATTERN
from .base import Group, SchedulerKind, documented


class LoraGroup(Group):
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


class OptimizerGroup(Group):
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


class SchedulerGroup(Group):
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


class TrainingGroup(Group):
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


class SupervisedHyperparams(Group):
    """``hyperparams``: the four groups of a supervised run."""

    lora: LoraGroup | None = Field(None, description="The adapter's shape.")
    optimizer: OptimizerGroup | None = Field(None, description="What performs the update.")
    scheduler: SchedulerGroup | None = Field(None, description="How the learning rate moves.")
    training: TrainingGroup | None = Field(None, description="The supervised loop.")


_STALENESS = (
    "Updates the rollout weights may lag the trainer's: 0 samples each update with the "
    "weights of the update before (on-policy); N samples update u with the weights after "
    "update u-1-N while the updates between train."
)


_CORRECTION = (
    "Correction for the gap between the sampler's and the trainer's log-probabilities: "
    "none, the token ratio capped at rolloutCorrectionCap, or sequences whose ratio leaves "
    "[1/rolloutCorrectionCap, rolloutCorrectionCap] left out of the loss."
)


class ReinforcementHyperparams(Group):
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
    lossFn: Literal["importance_sampling", "ppo", "cispo", "dro", "gspo"] | None = Field(
        None,
        description="Policy loss over the sampled completions, by its Tinker name: "
        "`importance_sampling` (tinker-cookbook's default RL loss), `ppo`, `cispo`, `dro`, "
        "or `gspo` (one importance ratio per sequence).",
    )
    lossAggregation: Literal["token_mean", "sequence_mean", "dr_grpo"] | None = Field(
        None,
        description="How the update's per-token losses become one number: `token_mean` "
        "(over every trained token of the update), `sequence_mean` (each sequence's "
        "token mean, then the mean over sequences) or `dr_grpo` (each sequence's sum "
        "over maxNewTokens, then the mean over sequences).",
    )
    advantageNormalization: Literal["population_std", "sample_std", "none"] | None = Field(
        None,
        description="What a group's rewards minus their mean are divided by: the group's "
        "population standard deviation, its sample standard deviation, or nothing.",
    )
    rolloutCorrection: Literal["none", "truncated_is", "sequence_mask"] | None = Field(
        None, description=_CORRECTION
    )
    rolloutCorrectionCap: float | None = Field(
        None, gt=1, le=1e6, description="The cap (and band) of rolloutCorrection."
    )
    maxStaleness: int | None = Field(None, ge=0, le=64, description=_STALENESS)
    reward: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        json_schema_extra=documented(f"({GRADER_PATTERN})|(^builtin:math$)"),
        description="The grader: `bundle:REFERENCE#MODULE[:FUNCTION]`, `model:REFERENCE`, or "
        "`builtin:math` (the \\boxed{} answer against the prompt's gold answer).",
    )
    seed: int | None = Field(
        None, ge=0, le=2**32 - 1, description="Seeds adapter initialisation and sampling."
    )
