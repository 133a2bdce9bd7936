"""The installed strategies, keyed by recipe ``schema_version`` and ``model.implementation``.

seeds/003: "The worker dispatches on the recipe's schema version and
model.implementation." Each :class:`Strategy` names the recipe computation it runs and
the implementations it accepts; :func:`select` validates a recipe document against the
one strategy its two identifiers pick and refuses an unknown pair, naming every pair that
is installed. ``minifield-worker --list-strategies`` prints :func:`listing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from akka_optimize.errors import InvalidRequest

from .recipe import PackedSftRecipe, QatRecipe, Recipe, TwoStageRecipe, validation_sentences

HF_CAUSAL_LM = "hf-causal-lm-v1"
"""A Hugging Face ``AutoModelForCausalLM`` directory (safetensors, fast tokenizer with a
chat template) run by transformers."""


class RecipeError(InvalidRequest):
    """A recipe the worker refuses (unknown strategy, bad field, capacity overflow...)."""

    code = "invalid_recipe"


@dataclass(frozen=True)
class Strategy:
    """One installed strategy.

    Attributes:
        name: the strategy's stable name (``packed-sft``, ``packed-qat``, ``two-stage``).
        schema_version: the recipe ``schema_version`` it takes; also its computation version.
        title: a few words for listings.
        implementations: the ``model.implementation`` values it accepts.
        recipe_class: the pydantic record that validates its recipes.
        trains_embedding: whether the tied embedding / LM head is updated.
        quantized: whether eligible body weights run ternary (QAT).
        needs_tied_embedding: whether the model must tie its embedding and LM head.
    """

    name: str
    schema_version: str
    title: str
    implementations: tuple[str, ...]
    recipe_class: type[Recipe]
    trains_embedding: bool
    quantized: bool
    needs_tied_embedding: bool

    @property
    def computation(self) -> str:
        """The recipe computation version (equal to the schema version it takes)."""
        return self.schema_version


STRATEGIES: tuple[Strategy, ...] = (
    Strategy(
        "two-stage",
        "11.0.0",
        "two-stage full-weight training (routing + arguments, embedding/head frozen)",
        (HF_CAUSAL_LM,),
        TwoStageRecipe,
        trains_embedding=False,
        quantized=False,
        needs_tied_embedding=True,
    ),
    Strategy(
        "packed-sft",
        "12.0.0",
        "packed SFT: complete action targets, every parameter leaf updated",
        (HF_CAUSAL_LM,),
        PackedSftRecipe,
        trains_embedding=True,
        quantized=False,
        needs_tied_embedding=False,
    ),
    Strategy(
        "packed-qat",
        "13.0.0",
        "packed QAT: ternary-g128-v1 body, FP32 master weights, dense distillation",
        (HF_CAUSAL_LM,),
        QatRecipe,
        trains_embedding=False,
        quantized=True,
        needs_tied_embedding=True,
    ),
)

REGISTRY: dict[tuple[str, str], Strategy] = {
    (s.schema_version, impl): s for s in STRATEGIES for impl in s.implementations
}
"""(schema_version, model.implementation) → the strategy that runs it."""


def installed_pairs() -> str:
    """Every installed pair as a sentence fragment."""
    return "; ".join(
        f"schema_version {v!r} with model.implementation {i!r} ({REGISTRY[(v, i)].name})"
        for v, i in sorted(REGISTRY)
    )


def lookup(schema_version: Any, implementation: Any) -> Strategy:
    """The strategy for a pair.

    Raises:
        RecipeError: no installed strategy takes the pair (names what is installed).
    """
    hashable = isinstance(schema_version, str) and isinstance(implementation, str)
    found = REGISTRY.get((schema_version, implementation)) if hashable else None
    if found is None:
        raise RecipeError(
            f"No installed strategy takes schema_version {schema_version!r} with "
            f"model.implementation {implementation!r}. Installed: {installed_pairs()}.",
            field="schema_version",
        )
    return found


def select(doc: Any) -> tuple[Strategy, Recipe]:
    """Pick the strategy of a recipe document and validate the document with it.

    Raises:
        RecipeError: not an object, an unknown (schema_version, implementation) pair, or
            fields the strategy's recipe refuses (every sentence, the first field named).
    """
    if not isinstance(doc, dict):
        raise RecipeError(f"A recipe is a JSON object, not {type(doc).__name__}.")
    model = doc.get("model")
    impl = model.get("implementation") if isinstance(model, dict) else None
    if "schema_version" not in doc:
        raise RecipeError("schema_version is missing.", field="schema_version")
    if impl is None:
        raise RecipeError("model.implementation is missing.", field="model.implementation")
    strategy = lookup(doc["schema_version"], impl)
    try:
        recipe = strategy.recipe_class.model_validate(doc)
    except ValidationError as exc:
        found = validation_sentences(exc)
        raise RecipeError(
            " ".join(s for _, s in found),
            field=found[0][0],
            details=[{"field": f, "message": s} for f, s in found],
        ) from None
    return strategy, recipe


def _defaults(model: type[BaseModel], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(_defaults(ann, path + "."))
        elif name not in ("schema_version", "implementation"):
            out[path] = "(required)" if info.is_required() else info.default
    return out


def settings_of(strategy: Strategy) -> dict[str, Any]:
    """Every recipe setting of a strategy with its default (``"(required)"`` if none)."""
    return _defaults(strategy.recipe_class, "")


def listing() -> list[dict[str, Any]]:
    """The registry as JSON: one object per strategy (``--list-strategies -o json``)."""
    return [
        {
            "name": s.name,
            "schema_version": s.schema_version,
            "computation": s.computation,
            "title": s.title,
            "implementations": list(s.implementations),
            "trains_embedding": s.trains_embedding,
            "quantized": s.quantized,
            "settings": settings_of(s),
        }
        for s in STRATEGIES
    ]


def listing_text() -> str:
    """The registry as text, one block per strategy."""
    lines: list[str] = []
    for item in listing():
        lines.append(f"{item['name']}  computation {item['computation']}  {item['title']}")
        lines.append(f"  schema_version: {item['schema_version']}")
        lines.append(f"  implementations: {', '.join(item['implementations'])}")
        lines.append("  settings (default):")
        for key, value in item["settings"].items():
            lines.append(f"    {key} = {value if isinstance(value, str) else repr(value)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
