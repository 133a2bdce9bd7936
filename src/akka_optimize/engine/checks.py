"""Checks that a saved adapter loads onto its base model (seeds/001, the adapter check).

The expected tensors come from the base model's own module tree, built on the
``meta`` device (no weights read): for every ``nn.Linear`` whose name ends in a
target module, PEFT saves ``base_model.model.<name>.lora_A.weight`` of shape
[rank, in_features] and ``….lora_B.weight`` of shape [out_features, rank]. An adapter
with missing, extra or misnamed tensors, or tensors of another rank, is refused with
the counts of tensors and parameters it holds and the base model expects.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from .errors import AdapterCheckError
from .targets import Targets, is_match, meta_model

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"


def expected_adapter_shapes(
    model_dir: Path, rank: int, target_modules: Targets, auto_class: str = "AutoModelForCausalLM"
) -> dict[str, tuple[int, int]]:
    """Tensor name → shape that PEFT saves for a LoRA of ``rank`` on ``target_modules``
    (suffixes or one regular expression, engine/targets.py) of the model as
    ``auto_class`` loads it."""
    model = meta_model(model_dir, auto_class)
    shapes: dict[str, tuple[int, int]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and is_match(name, target_modules):
            shapes[f"base_model.model.{name}.lora_A.weight"] = (rank, mod.in_features)
            shapes[f"base_model.model.{name}.lora_B.weight"] = (mod.out_features, rank)
    return shapes


def _held_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], str | None]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}, None
    except Exception as exc:  # a truncated or overwritten file
        return {}, f"{path.name} cannot be read ({exc})"


def _few(names: list[str], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def verify_adapter(
    adapter_dir: Path,
    model_dir: Path,
    rank: int,
    target_modules: Targets,
    auto_class: str = "AutoModelForCausalLM",
    alpha: float | None = None,
) -> dict[str, int]:
    """Check ``adapter_dir`` (PEFT format) against the base model at ``model_dir``.

    Args:
        alpha: the run's ``config.hyperparams.lora.alpha``; when given, the saved
            ``lora_alpha`` must equal it (with ``r`` = ``rank``, the scaling alpha/r an
            endpoint applies is the one the run trained with) and ``use_rslora`` be off.

    Returns:
        ``{"tensors": n, "parameters": p}`` held (equal to those expected).

    Raises:
        AdapterCheckError: unreadable file, missing/extra/misnamed tensors, a tensor of
            another shape (rank), or an adapter_config.json that disagrees; the message
            states tensors and parameters held and expected.
    """
    adapter_dir = Path(adapter_dir)
    expected = expected_adapter_shapes(Path(model_dir), rank, target_modules, auto_class)
    problems: list[str] = []
    held: dict[str, tuple[int, ...]] = {}
    if not (adapter_dir / ADAPTER_FILE).exists():
        problems.append(f"{ADAPTER_FILE} is missing")
    else:
        held, err = _held_shapes(adapter_dir / ADAPTER_FILE)
        if err:
            problems.append(err)
    missing = sorted(set(expected) - set(held))
    extra = sorted(set(held) - set(expected))
    if held and missing:
        problems.append(f"{len(missing)} missing ({_few(missing)})")
    if extra:
        problems.append(f"{len(extra)} extra or misnamed ({_few(extra)})")
    wrong = sorted(k for k in set(held) & set(expected) if held[k] != expected[k])
    if wrong:
        k = wrong[0]
        problems.append(
            f"{len(wrong)} of another shape (rank), e.g. {k} is {list(held[k])}, expected {list(expected[k])}"
        )
    problems += _config_problems(adapter_dir, rank, target_modules, alpha)
    held_params = sum(_numel(s) for s in held.values())
    exp_params = sum(_numel(s) for s in expected.values())
    if problems:
        raise AdapterCheckError(
            f"The adapter saved at {adapter_dir} does not load onto the base model: "
            f"{'; '.join(problems)}. It holds {len(held)} tensors ({held_params:,} parameters); "
            f"the base model at rank {rank} expects {len(expected)} tensors ({exp_params:,} parameters).",
            held_tensors=len(held),
            held_parameters=held_params,
            expected_tensors=len(expected),
            expected_parameters=exp_params,
            problems=problems,
        )
    return {"tensors": len(held), "parameters": held_params}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _config_problems(
    adapter_dir: Path, rank: int, target_modules, alpha: float | None = None
) -> list[str]:
    path = adapter_dir / CONFIG_FILE
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"{CONFIG_FILE} cannot be read ({exc})"]
    out = []
    if cfg.get("r") != rank:
        out.append(f"{CONFIG_FILE} has r={cfg.get('r')}, expected {rank}")
    saved = cfg.get("target_modules") or ()
    if isinstance(target_modules, str) or isinstance(saved, str):
        if saved != target_modules:  # a regular expression is saved as the one string
            out.append(f"{CONFIG_FILE} targets {saved!r}")
    elif set(saved) != set(target_modules):
        out.append(f"{CONFIG_FILE} targets {sorted(saved)}")
    if alpha is not None and (cfg.get("lora_alpha") != alpha or cfg.get("use_rslora")):
        out.append(
            f"{CONFIG_FILE} has lora_alpha={cfg.get('lora_alpha')}"
            f"{' with use_rslora' if cfg.get('use_rslora') else ''}, expected {alpha:g} "
            f"(the run trained with scaling alpha/r = {alpha / rank:g})"
        )
    if cfg.get("use_dora"):
        out.append("it is a DoRA adapter")
    if cfg.get("modules_to_save"):
        out.append("it has modules_to_save")
    return out
