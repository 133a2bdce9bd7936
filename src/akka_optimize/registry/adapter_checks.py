"""Checks of a PEFT adapter folder against its base model, before it is registered (F118).

An adapter that an endpoint cannot serve, or that does not fit the base model, is refused
with a sentence naming what is wrong and where (the file, the config key, the tensor),
so a refused import or ``registry models register`` registers nothing. The rules:

- ``adapter_config.json`` exists, is JSON, and its ``peft_type`` is ``LORA``;
- no DoRA (``use_dora``), no ``modules_to_save``, no adapter on ``lm_head`` or on an
  embedding (``embed_tokens``, ``wte``, ``lora_embedding_*`` tensors): the serving engine
  loads plain LoRA on linear layers only;
- the rank (``r`` and every ``rank_pattern`` value) is at most the serving engine's
  largest (``serving.maxLoraRank``);
- the weights are in ``adapter_model.safetensors``; every tensor is a ``lora_A`` or
  ``lora_B`` of a module the base model has, with shapes ``[r, in]`` and ``[out, r]`` for
  the base weight ``[out, in]``;
- every ``target_modules`` entry names at least one module of the base model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_LORA = re.compile(r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B)(?:\.[^.]+)?\.weight$")
_EMBEDDINGS = ("embed_tokens", "wte", "word_embeddings", "embed_in", "embeddings")


def _refuse(message: str, field: str) -> None:
    raise InvalidRequest(message, field=field, code="adapter_refused")


def read_config(adapter_dir: Path) -> dict[str, Any]:
    """``adapter_config.json`` of the folder. Raises InvalidRequest naming the file."""
    path = adapter_dir / CONFIG
    if not path.is_file():
        _refuse(f"{CONFIG} is missing: a PEFT adapter folder holds {CONFIG} and {WEIGHTS}.", CONFIG)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _refuse(f"{CONFIG} is not valid JSON: {exc}.", CONFIG)
    if not isinstance(cfg, dict):
        _refuse(f"{CONFIG} must hold a JSON object.", CONFIG)
    return cfg


def _check_config(cfg: dict[str, Any], max_rank: int) -> int:
    """The config rules; returns the largest rank."""
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        _refuse(
            f"{CONFIG}: peft_type is {cfg.get('peft_type')!r}; only LoRA adapters are served.",
            f"{CONFIG}:peft_type",
        )
    if cfg.get("use_dora"):
        _refuse(
            f"{CONFIG}: use_dora is true; DoRA adapters cannot be served (the serving engine "
            "loads plain LoRA). Train or export the adapter without DoRA.",
            f"{CONFIG}:use_dora",
        )
    if cfg.get("modules_to_save"):
        _refuse(
            f"{CONFIG}: modules_to_save is {cfg['modules_to_save']!r}; an adapter that saves "
            "whole modules cannot be served. Train it with LoRA layers only.",
            f"{CONFIG}:modules_to_save",
        )
    targets = cfg.get("target_modules") or []
    names = [targets] if isinstance(targets, str) else list(targets)
    for t in names:
        if "lm_head" in t or any(e in t for e in _EMBEDDINGS):
            _refuse(
                f"{CONFIG}: target_modules includes {t!r}; adapters on lm_head or the "
                "embeddings cannot be served. Target the attention and MLP projections.",
                f"{CONFIG}:target_modules",
            )
    ranks = [int(cfg.get("r") or 0), *(int(v) for v in (cfg.get("rank_pattern") or {}).values())]
    rank = max(ranks)
    if rank < 1:
        _refuse(f"{CONFIG}: r must be a positive rank, not {cfg.get('r')!r}.", f"{CONFIG}:r")
    if rank > max_rank:
        _refuse(
            f"{CONFIG}: rank {rank} is above the serving engine's largest, {max_rank} "
            "(serving.maxLoraRank); train with a rank at most that.",
            f"{CONFIG}:r",
        )
    return rank


def _shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
            out[key] = tuple(f.get_slice(key).get_shape())
    return out


def base_weight_shapes(base_dir: Path) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` of every ``*.safetensors`` file in the base model folder
    (read from the headers; nothing is loaded)."""
    out: dict[str, tuple[int, ...]] = {}
    for p in sorted(Path(base_dir).glob("*.safetensors")):
        out.update(_shapes(p))
    return out


def _rank_of(module: str, cfg: dict[str, Any]) -> int:
    for pattern, r in (cfg.get("rank_pattern") or {}).items():
        if re.search(rf"(^|\.){pattern}$", module):
            return int(r)
    return int(cfg["r"])


def _check_tensors(
    adapter: dict[str, tuple[int, ...]], base: dict[str, tuple[int, ...]], cfg: dict[str, Any]
) -> list[str]:
    """The tensor rules; returns the adapted module names."""
    modules = set()
    for key, shape in sorted(adapter.items()):
        where = f"{WEIGHTS}: tensor {key}"
        if "lora_embedding" in key or "lm_head" in key:
            _refuse(f"{where} adapts lm_head or an embedding, which cannot be served.", WEIGHTS)
        m = _LORA.match(key[len(_PREFIX) :] if key.startswith(_PREFIX) else key)
        if m is None:
            _refuse(f"{where} is not a lora_A or lora_B weight of a module.", WEIGHTS)
        module, kind = m.group("module"), m.group("kind")
        if f"{module}.weight" not in base:
            _refuse(f"{where}: the base model has no module {module}.", WEIGHTS)
        out_f, in_f = base[f"{module}.weight"][:2]
        r = _rank_of(module, cfg)
        want = (r, in_f) if kind == "lora_A" else (out_f, r)
        if shape != want:
            _refuse(
                f"{where} has shape {list(shape)}; the base model's {module} is "
                f"[{out_f}, {in_f}] at rank {r}, so {kind} must be {list(want)}.",
                WEIGHTS,
            )
        modules.add(module)
    if not modules:
        _refuse(f"{WEIGHTS} holds no LoRA tensors.", WEIGHTS)
    return sorted(modules)


def _check_targets(cfg: dict[str, Any], base: dict[str, tuple[int, ...]]) -> None:
    targets = cfg.get("target_modules") or []
    linear = [
        k[: -len(".weight")] for k, s in base.items() if k.endswith(".weight") and len(s) == 2
    ]
    if isinstance(targets, str):
        if not any(re.fullmatch(targets, n) for n in linear):
            _refuse(
                f"{CONFIG}: target_modules {targets!r} matches no module of the base model.",
                f"{CONFIG}:target_modules",
            )
        return
    for t in targets:
        if not any(n == t or n.endswith("." + t) for n in linear):
            _refuse(
                f"{CONFIG}: target_modules names {t!r}, which the base model does not have.",
                f"{CONFIG}:target_modules",
            )


def check_adapter(adapter_dir: Path, base_dir: Path, *, max_rank: int) -> dict[str, Any]:
    """Check a PEFT adapter folder against the base model folder (rules in the module doc).

    Args:
        adapter_dir: the adapter folder (``adapter_config.json``, ``adapter_model.safetensors``).
        base_dir: the base model's weights folder (``*.safetensors``, ``config.json``).
        max_rank: the serving engine's largest rank (``serving.maxLoraRank``).

    Returns:
        ``{"rank", "targetModules", "adaptedModules"}`` for the version's metadata.

    Raises:
        InvalidRequest: (``code`` ``adapter_refused``) the first rule broken, naming the
            file and key or tensor.
    """
    adapter_dir, base_dir = Path(adapter_dir), Path(base_dir)
    cfg = read_config(adapter_dir)
    rank = _check_config(cfg, max_rank)
    weights = adapter_dir / WEIGHTS
    if not weights.is_file():
        found = sorted(p.name for p in adapter_dir.iterdir())
        _refuse(f"{WEIGHTS} is missing from the adapter folder (it holds {found}).", WEIGHTS)
    base = base_weight_shapes(base_dir)
    if not base:
        _refuse(f"The base model folder {base_dir} holds no safetensors weights.", "baseModel")
    _check_targets(cfg, base)
    modules = _check_tensors(_shapes(weights), base, cfg)
    targets = cfg.get("target_modules")
    return {"rank": rank, "targetModules": targets, "adaptedModules": len(modules)}
