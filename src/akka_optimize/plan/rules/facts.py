"""The facts the plan rules read beside a plan's fields: its loop, device count, device
profile, base model's catalog entry and model name (:class:`Facts`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...deployment import DeviceProfile
from ..environment import CatalogEntryView, PlanEnvironment
from ..schema.run import RunPlan


@dataclass
class Facts:
    """What the rules need to know about a plan beyond its fields."""

    method: str
    gpus: int
    profile: DeviceProfile
    entry: CatalogEntryView | None
    model_name: str

    @property
    def multi(self) -> bool:
        """More than one device."""
        return self.gpus > 1

    @property
    def sft_single(self) -> bool:
        """A supervised run on one device, or a preference run (no memory or engine
        settings)."""
        return self.method == "dpo" or (self.method == "sft" and not self.multi)

    @property
    def qualified_limit(self) -> int | None:
        """The base model's qualified token limit on the chosen profile."""
        return self.entry.qualified_limit(self.profile.name) if self.entry else None

    @classmethod
    def build(
        cls,
        plan: RunPlan,
        env: PlanEnvironment,
        profile: DeviceProfile,
        entry: CatalogEntryView | None,
    ) -> Facts:
        """Facts of ``plan`` on ``profile`` with the base model's ``entry``."""
        gpus = plan.execution.gpus if plan.execution and plan.execution.gpus else 1
        name = plan.modelName or plan.baseModel.rsplit("/", 1)[-1]
        return cls(plan.config.method, gpus, profile, entry, name.lower())


def hp_path(facts: Facts) -> str:
    return {"rl": "config.rlHyperparams", "dpo": "config.dpoHyperparams"}.get(
        facts.method, "config.hyperparams"
    )
