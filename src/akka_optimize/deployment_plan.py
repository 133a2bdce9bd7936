"""The deployment file's sections owned by :mod:`akka_optimize.plan`: which memory and
engine settings a plan may state (``memorySettings``, ``engineSettings``), and the strict
base model every section of :mod:`akka_optimize.deployment` uses."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .engine_settings import BY_KEY, coerce


class Strict(BaseModel):
    """A deployment section: unknown keys are refused, fields by name or alias."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


MEMORY_SETTINGS: tuple[str, ...] = (
    "execution.memory.offload.weights",
    "execution.memory.offload.optimizer",
    "execution.memory.offload.activations",
    "execution.memory.sharding",
    "execution.rollout.memoryShare",
    "config.model.weightPrecision",
)
"""The memory settings of seeds/001 "Choose a run's memory settings", by plan path."""


class ValueRange(Strict):
    """An inclusive numeric range of allowed values."""

    min: float
    max: float


class MemorySettingsPolicy(Strict):
    """``memorySettings``: which memory settings a plan may state, and their defaults.

    ``allowed`` maps a plan path of :data:`MEMORY_SETTINGS` to the values a plan may give
    it (a list, or ``{min, max}`` for ``execution.rollout.memoryShare``); a setting not
    listed is refused when stated, naming the setting. ``defaults`` holds the configured
    default of each setting (a run that omits a setting takes it; seeds/001).
    """

    allowed: dict[str, list[bool | str | float] | ValueRange] = Field(default_factory=dict)
    defaults: dict[str, bool | str | float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_paths(self) -> MemorySettingsPolicy:
        for section in ("allowed", "defaults"):
            for key in getattr(self, section):
                if key not in MEMORY_SETTINGS:
                    raise ValueError(
                        f"{section}.{key} is not a memory setting; the settings are "
                        + ", ".join(MEMORY_SETTINGS)
                    )
        return self


class EngineSettingsPolicy(Strict):
    """``engineSettings``: which ``config.engineSettings`` keys a plan may state.

    ``allowed`` lists keys (``"*"`` allows every declared key; ``"checks.*"`` a group);
    ``defaults`` overrides declared defaults (keys and types declared in
    :mod:`akka_optimize.engine_settings`).
    """

    allowed: list[str] = Field(default_factory=list)
    defaults: dict[str, bool | int | float | str | None] = Field(default_factory=dict)

    def allows(self, key: str) -> bool:
        """Whether a plan may state ``key``."""
        for pat in self.allowed:
            if pat == "*" or pat == key or (pat.endswith(".*") and key.startswith(pat[:-1])):
                return True
        return False

    @model_validator(mode="after")
    def _known_keys(self) -> EngineSettingsPolicy:
        for key, value in self.defaults.items():
            if key not in BY_KEY:
                raise ValueError(f"defaults.{key} is not a declared engine setting")
            _, why = coerce(BY_KEY[key], value)
            if why:
                raise ValueError(f"defaults.{key} {why}")
        return self
