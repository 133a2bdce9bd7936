"""The hyperparameter group of a preference run: ``dpoHyperparams`` (``config.method: dpo``).

Source: issue 50 (preference training as a first-class method); seeds/004 §1.4 (DPO / IPO:
the loss types as a list with one weight each, label smoothing for DPO only, incompatible
with IPO). The loss formulas are those of Rafailov et al. 2023 (DPO, arXiv:2305.18290) and
Azar et al. 2023 (IPO, arXiv:2310.12036) as TRL's ``DPOTrainer`` computes them
(:mod:`akka_optimize.engine.dpo.loss`). Shapes and schema bounds only; the rules
(:mod:`akka_optimize.plan.rules.identity`) check the fields against each other.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Group
from .hyperparams import LoraGroup, OptimizerGroup, SchedulerGroup

DpoLossType = Literal["sigmoid", "ipo"]


def _field(description: str, **bounds: Any) -> Any:
    """An optional plan field (null takes the preference default) with its bounds."""
    return Field(None, description=description, **bounds)


class PreferenceHyperparams(Group):
    """``dpoHyperparams``: ``lora``, ``optimizer`` and ``scheduler`` beside the preference
    loop's own fields. A pair (a prompt, its preferred and its non-preferred answer) is the
    unit the loop counts: micro batch and gradient accumulation count pairs."""

    lora: LoraGroup | None = Field(None, description="The adapter's shape.")
    optimizer: OptimizerGroup | None = Field(None, description="What performs the update.")
    scheduler: SchedulerGroup | None = Field(None, description="How the learning rate moves.")
    beta: float | None = _field(
        "β: how far the policy may move from the reference (the base model with the adapter "
        "off). Higher keeps it closer.",
        gt=0,
        le=100,
    )
    lossTypes: list[DpoLossType] | None = _field(
        "The preference losses, summed with `lossWeights`: `sigmoid` (DPO) and `ipo` (IPO, on "
        "log-ratios averaged over each answer's tokens), each named once.",
        min_length=1,
        max_length=2,
        json_schema_extra={"uniqueItems": True},
    )
    lossWeights: list[float] | None = _field(
        "One weight (0 to 1000) per entry of `lossTypes`; null weighs each 1.",
        min_length=1,
        max_length=2,
    )
    labelSmoothing: float | None = _field(
        "Conservative DPO: the share of pairs assumed mislabelled (the `sigmoid` loss only; "
        "refused with `ipo`).",
        ge=0,
        lt=0.5,
    )
    epochs: int | None = _field("Passes over every pair.", ge=1, le=1000)
    microBatchPerGpu: int | None = _field(
        "Pairs in one forward pass on one device (a pair's two answers share its pass).",
        ge=1,
        le=4096,
    )
    gradientAccumulation: int | None = _field(
        "Forward/backward passes per optimizer update.", ge=1, le=4096
    )
    validationFrequencySteps: int | None = _field(
        "Score the validation pairs every N updates (and after the last); 0 only after the "
        "last. Needs `config.data.validationDataset`.",
        ge=0,
        le=1_000_000,
    )
    seed: int | None = _field("Seeds adapter initialisation, dropout and the pair order.", ge=0, le=2**32 - 1)  # fmt: skip
    maxSteps: int | None = _field("Stop after this many updates; null trains every epoch.", ge=1, le=10_000_000)  # fmt: skip
