"""Which modules a LoRA adapter covers, and how a base model is loaded.

A catalog entry's ``loraTargetModules`` (catalog/entries.py) is either a list of
module-name suffixes (text-only models: ``q_proj`` adapts every module whose full name
is ``q_proj`` or ends in ``.q_proj``) or one regular expression matched with
``re.fullmatch`` against full module names (models that load with vision or audio
towers: the language model's attention and MLP projections only,
DATA-AND-TRAINING-RULES.md §1.9). These are PEFT's own ``target_modules`` rules
(``peft.tuners.tuners_utils.check_target_module_exists``), reproduced here so that the
engine, the adapter check and the submit-time refusal agree on what is adapted before
PEFT is called.

``autoClass`` names the transformers class that loads the model the way the real
checkpoint loads (``AutoModelForImageTextToText`` for Gemma 3 4B, Gemma 4 and
Ministral 3, which are multimodal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import nn

from ..lazy_imports import transformers_names
from .errors import EngineError

AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModelForImageTextToText")
TARGETS_FIELD = "config.hyperparams.lora.targetModules"
Targets = tuple[str, ...] | list[str] | str
"""A list of module-name suffixes, or one regular expression (``re.fullmatch``)."""


def auto_class(name: str) -> Any:
    """The transformers auto class called ``name`` (one of :data:`AUTO_CLASSES`).

    Raises:
        EngineError: any other name.
    """
    if name not in AUTO_CLASSES:
        raise EngineError(
            f"autoClass {name!r} is not one of {', '.join(AUTO_CLASSES)}.", field="autoClass"
        )
    return transformers_names(name)[0]


def meta_model(model_dir: Path, auto_class_name: str = "AutoModelForCausalLM") -> nn.Module:
    """The model's module tree from its ``config.json`` on the ``meta`` device (no weights
    are read and no memory is allocated), loaded by the class the real model loads with."""
    import torch

    (auto_config,) = transformers_names("AutoConfig")
    config = auto_config.from_pretrained(model_dir)
    with torch.device("meta"):
        return auto_class(auto_class_name).from_config(config)


def is_match(name: str, targets: Targets) -> bool:
    """Whether full module name ``name`` is a LoRA target (PEFT's rule)."""
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


def linear_names(model: nn.Module) -> list[str]:
    """Full names of the model's ``nn.Linear`` modules, in module order."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]


def matched_modules(names: Iterable[str], targets: Targets) -> list[str]:
    """The names among ``names`` that ``targets`` selects, in the given order."""
    return [n for n in names if is_match(n, targets)]


def check_targets(model: nn.Module, targets: Targets, where: str = "") -> list[str]:
    """The full names of the linear modules ``targets`` adapts in ``model``.

    Every suffix of a list must match at least one linear module, and a regular
    expression must match at least one (a target matching nothing trains nothing it
    was meant to, silently).

    Args:
        where: words naming the target's origin for the message (``"catalog entry
            google/gemma-4-E2B-it (family gemma4)"``).

    Raises:
        EngineError: a target matches no linear module (``field``: the targets' path).
    """
    names = linear_names(model)
    origin = f" of {where}" if where else ""
    if isinstance(targets, str):
        hits = matched_modules(names, targets)
        if not hits:
            raise EngineError(
                f"loraTargetModules{origin} is the regular expression {targets!r}, which "
                f"matches no linear module of this model (e.g. {', '.join(names[:3])}).",
                code="lora_targets_match_nothing",
                field=TARGETS_FIELD,
            )
        return hits
    if not targets:
        raise EngineError(
            f"loraTargetModules{origin} names no module.",
            code="lora_targets_match_nothing",
            field=TARGETS_FIELD,
        )
    suffixes = {n.rsplit(".", 1)[-1] for n in names}
    missing = [t for t in targets if not matched_modules(names, [t])]
    if missing:
        raise EngineError(
            f"loraTargetModules{origin} names {missing}, which this model does not have; "
            f"its linear modules are {sorted(suffixes)}.",
            code="lora_targets_match_nothing",
            field=TARGETS_FIELD,
        )
    return matched_modules(names, targets)


def peft_targets(targets: Targets) -> list[str] | str:
    """``targets`` in the form ``peft.LoraConfig(target_modules=…)`` takes: a regular
    expression stays one string (PEFT would treat a one-element list as a suffix)."""
    return targets if isinstance(targets, str) else list(targets)
