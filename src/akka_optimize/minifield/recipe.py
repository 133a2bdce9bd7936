"""Recipe documents of the minifield worker (seeds/003 "Strategies and settings").

A recipe is one JSON object::

    {"schema_version": "12.0.0",
     "model": {"implementation": "hf-causal-lm-v1", "path": "models/tiny"},
     "data": {"path": "train.jsonl", "serialization": "minifield.action.v1"},
     "training": {...the strategy's training object...},
     "limits": {"max_steps": null, "checkpoint_every_steps": 100}}

``schema_version`` and ``model.implementation`` pick the strategy
(:mod:`akka_optimize.minifield.registry`); the strategy's recipe class validates the rest.
Every record refuses a field it does not declare (``extra="forbid"``), and
:func:`validation_sentences` turns pydantic's errors into sentences that name the field
and the bound. Defaults not given by the page (optimizer, QAT objective) are the
choices documented in README.md "minifield-worker".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SEQUENCE_LENGTH_MIN = 2
SEQUENCE_LENGTH_MAX = 32768
DEFAULT_SEED = 42
SERIALIZATION = "minifield.action.v1"


class Strict(BaseModel):
    """A record that refuses undeclared fields and is immutable once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(Strict):
    """``model``: which weights the recipe starts from and how they are run."""

    implementation: str = Field(description="the model implementation the strategy runs")
    path: str = Field(
        min_length=1,
        description="a Hugging Face model directory (config.json, safetensors, tokenizer), "
        "relative to the recipe file or absolute",
    )


class DataRef(Strict):
    """``data``: the training rows and how a row becomes tokens."""

    path: str = Field(min_length=1, description="a JSONL file of minifield.action.v1 rows")
    serialization: Literal["minifield.action.v1"] = SERIALIZATION


class Optimizer(Strict):
    """``training.optimizer``: AdamW (Loshchilov & Hutter 2019) and its defaults."""

    name: Literal["adamw"] = "adamw"
    learning_rate: float = Field(1e-5, gt=0, le=1)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    epsilon: float = Field(1e-8, gt=0, le=1e-2)
    weight_decay: float = Field(0.0, ge=0, le=1)
    max_grad_norm: float = Field(1.0, ge=0, description="0 disables clipping")


class Limits(Strict):
    """``limits``: the update cap and the checkpoint cadence."""

    max_steps: int | None = Field(None, ge=1, le=10_000_000)
    checkpoint_every_steps: int = Field(100, ge=1, le=10_000_000)


class PackedTraining(Strict):
    """The packed ``training`` object of recipe computation 12.0.0 (seeds/003 example)."""

    sequence_length: int = Field(8192, ge=SEQUENCE_LENGTH_MIN, le=SEQUENCE_LENGTH_MAX)
    rows_per_microbatch: int = Field(1, ge=1, le=1024)
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096)
    projection_chunk_size: int = Field(256, ge=1, le=65536)
    max_projection_chunks: int = Field(8, ge=1, le=65536)
    seed: int = Field(DEFAULT_SEED, ge=0, le=2**63 - 1)
    compute_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    master_dtype: Literal["float32"] = "float32"
    quantization_profile: Literal["disabled-v1"] = "disabled-v1"
    schedule: Literal["constant-v1"] = "constant-v1"
    optimizer: Optimizer = Optimizer()

    @property
    def target_capacity(self) -> int:
        """Supervised target positions one microbatch may hold: chunk size × chunks."""
        return self.projection_chunk_size * self.max_projection_chunks


class TwoStageTraining(PackedTraining):
    """Two-stage full-weight training: the packed layout plus ``updates``."""

    updates: int = Field(ge=1, le=10_000_000, description="optimizer updates to run")


class QatSettings(Strict):
    """``training.qat``: the QAT objective and the scale rule (choices of this package)."""

    scale_rule: Literal["absmean-v1", "absmax-v1"] | None = Field(
        None, description="null uses the quantization profile's rule (absmean-v1)"
    )
    cross_entropy_weight: float = Field(1.0, ge=0, le=1000)
    distillation_weight: float = Field(1.0, ge=0, le=1000)
    distillation_temperature: float = Field(1.0, gt=0, le=100)

    @model_validator(mode="after")
    def _some_term(self) -> QatSettings:
        if self.cross_entropy_weight == 0 and self.distillation_weight == 0:
            raise ValueError(
                "training.qat.cross_entropy_weight and training.qat.distillation_weight are "
                "both 0, which disables the whole objective; give one of them a weight above 0"
            )
        return self


class QatTraining(PackedTraining):
    """Packed QAT (recipe computation 13.0.0): ternary profile, immediate schedule."""

    quantization_profile: Literal["ternary-g128-v1"] = "ternary-g128-v1"  # type: ignore[assignment]
    schedule: Literal["immediate-v1"] = "immediate-v1"  # type: ignore[assignment]
    qat: QatSettings = QatSettings()


class Recipe(Strict):
    """The common recipe envelope; strategies narrow ``training`` (see ``recipe_class``)."""

    schema_version: str
    model: ModelRef
    data: DataRef
    training: PackedTraining = PackedTraining()
    limits: Limits = Limits()


class PackedSftRecipe(Recipe):
    """Recipe computation 12.0.0."""

    schema_version: Literal["12.0.0"]
    training: PackedTraining = PackedTraining()


class QatRecipe(Recipe):
    """Recipe computation 13.0.0."""

    schema_version: Literal["13.0.0"]
    training: QatTraining = QatTraining()


class TwoStageRecipe(Recipe):
    """Two-stage full-weight training (``training.updates`` = ``limits.max_steps``)."""

    schema_version: Literal["11.0.0"]
    training: TwoStageTraining

    @model_validator(mode="after")
    def _updates_match(self) -> TwoStageRecipe:
        if self.limits.max_steps != self.training.updates:
            raise ValueError(
                f"training.updates is {self.training.updates} but limits.max_steps is "
                f"{self.limits.max_steps}; two-stage training needs limits.max_steps set to "
                "the same value as training.updates"
            )
        return self


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "the recipe"


def _sentence(err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    path = _where(loc)
    typ = err.get("type", "")
    ctx = err.get("ctx") or {}
    got = err.get("input")
    shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
    if len(shown) > 80:
        shown = shown[:80] + "…"
    bounds = {
        "greater_than_equal": "at least {ge}",
        "greater_than": "above {gt}",
        "less_than_equal": "at most {le}",
        "less_than": "below {lt}",
    }
    if typ in bounds:
        return f"{path} must be {bounds[typ].format(**ctx)}, not {shown}."
    if typ == "extra_forbidden":
        return f"{path} is not a recipe field; an undeclared field is refused, not ignored."
    if typ == "missing":
        return f"{path} is missing."
    if typ == "literal_error":
        return f"{path} must be {ctx.get('expected')}, not {shown}."
    if typ == "value_error":
        return str(ctx.get("error", err.get("msg", "")))[:400].rstrip(".") + "."
    if typ in ("model_type", "model_attributes_type", "dict_type"):
        return f"{path} must be a JSON object, not {shown}."
    return f"{path}: {err.get('msg', 'invalid value')}; got {shown}."


def validation_sentences(exc: ValidationError) -> list[tuple[str, str]]:
    """``(field path, sentence)`` for each error of a recipe validation, in order."""
    out = []
    for e in exc.errors(include_url=False):
        path, sentence = _where(tuple(e.get("loc", ()))), _sentence(e)
        if path == "the recipe" and sentence.split(" ", 1)[0].count("."):
            path = sentence.split(" ", 1)[0]  # a rule across fields starts with its field
        out.append((path, sentence))
    return out
