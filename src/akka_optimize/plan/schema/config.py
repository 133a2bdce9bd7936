"""The ``config`` record of a run plan (what trains, on which data, and how) and its
``model``, ``data`` and ``loss`` groups.

Source: seeds/000 "Training parameters" (``model``), "Conversations and tool calls as
training data" (``loss``); seeds/001 "Flex attention for Gemma 4", "Set the training
engine's settings directly" (``engineSettings``), "Other changes" (``data.packing``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import REFERENCE, AttentionImplementation, Group, Precision, documented
from .dpo import PreferenceHyperparams
from .hyperparams import ReinforcementHyperparams, SupervisedHyperparams


class ModelGroup(Group):
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


class DataGroup(Group):
    """``config.data``: validation data and how conversations fill a pass."""

    validationDataset: str | None = Field(
        None,
        min_length=1,
        max_length=400,
        json_schema_extra=documented(REFERENCE),
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


class LossGroup(Group):
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


class RunConfig(Group):
    """``config``: what trains, on which data, and how."""

    dataset: str = Field(
        min_length=1,
        max_length=400,
        json_schema_extra=documented(REFERENCE),
        description="Registry reference of the training dataset (`triage/train`, "
        "`triage/train:v3`, `train` in the project's namespace); pinned when accepted.",
    )
    method: Literal["sft", "rl", "dpo"] = Field(
        description="`sft` (supervised, reads `hyperparams`), `rl` (reinforcement, reads "
        "`rlHyperparams`) or `dpo` (preference pairs, DPO or IPO, reads `dpoHyperparams`)."
    )
    hyperparams: SupervisedHyperparams | None = Field(
        None, description="Supervised groups: lora, optimizer, scheduler, training."
    )
    rlHyperparams: ReinforcementHyperparams | None = Field(
        None, description="Reinforcement groups: lora, optimizer, scheduler and loop fields."
    )
    dpoHyperparams: PreferenceHyperparams | None = Field(
        None, description="Preference groups: lora, optimizer, scheduler and loop fields."
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
