"""``base-models candidates``: a publisher's hub repositories and the catalog's verdict.

seeds/000 "Base model flexibility": "base-models candidates walks a publisher's
repositories on the hub and reports the catalog's verdict on each. With --catalog, it
prints the entries to paste into the deployment's catalog". Pasting that output (under
``catalog:``, after ``- include: shipped``) makes the model selectable.

Verdicts: ``allowed`` (in the catalog), ``supported`` (a family the engine adapts, not in
the catalog yet), ``unsupported`` (another model type, or no transformers config).
Envelopes of pasted entries are estimates (``measured: false``) from the parameter count.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable
from typing import Any

import yaml

from ..errors import AkkaError
from .entries import Catalog, CatalogEntry
from .sources import hub_failure

FAMILY_OF_MODEL_TYPE = {
    "llama": "llama",
    "qwen3": "qwen3",
    "gemma3_text": "gemma3",
    "gemma3": "gemma3",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
    "ministral": "ministral",
    "ministral3": "ministral",
    "mistral3": "ministral",
}
"""``config.json`` model types the engine loads, and their catalog family."""

MULTIMODAL = {"gemma3", "gemma4", "mistral3"}
"""Model types that load with vision (and audio) towers: LoRA targets by regex."""

TEXT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LM_ONLY_TARGETS = (
    r"model\.language_model\.layers\.\d+\.(_checkpoint_wrapped_module\.)?"
    r"(self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj"
)
"""Language-model attention and MLP projections only (DATA-AND-TRAINING-RULES.md §1.9)."""

_HINTS = {
    "llama": {"chatTemplate": "chatml"},
    "qwen3": {"chatTemplate": "qwen3", "toolParser": "hermes", "reasoningParser": "qwen3"},
    "gemma3": {"chatTemplate": "gemma3"},
    "gemma4": {"chatTemplate": "gemma4"},
    "ministral": {"chatTemplate": "mistral", "toolParser": "mistral"},
}


def _get(info: Any, name: str, default: Any = None) -> Any:
    if isinstance(info, dict):
        return info.get(name, default)
    return getattr(info, name, default)


def _model_type(info: Any) -> str | None:
    cfg = _get(info, "config") or {}
    mt = cfg.get("model_type") if isinstance(cfg, dict) else None
    if mt:
        return str(mt)
    for tag in _get(info, "tags") or []:
        if tag in FAMILY_OF_MODEL_TYPE:
            return str(tag)
    return None


def _parameters(info: Any) -> int | None:
    st = _get(info, "safetensors")
    total = _get(st, "total") if st is not None else None
    return int(total) if total else None


def estimate_envelope(parameters: int | None, profiles: Iterable[Any]) -> dict[str, dict]:
    """Estimated envelopes (``measured: false``) for a model of ``parameters`` parameters.

    Model: bf16 weights take 2 bytes per parameter; one token of a LoRA pass takes
    about ``0.75 + 0.5 × billions of parameters`` MiB of activations (logits included);
    85 % of a device's memory is usable. The token limit is rounded down to a multiple of
    1,024 and capped at 65,536. CPU profiles are estimated only below one billion
    parameters (fp32: 4 bytes per parameter). No estimate without a parameter count.
    """
    if not parameters:
        return {}
    billions = parameters / 1e9
    per_token_mib = 0.75 + 0.5 * billions
    out: dict[str, dict] = {}
    for p in profiles:
        if p.kind == "cpu":
            if billions >= 1:
                continue
            mem = p.hostMemoryGiB
            weights_gib = 4 * parameters / 2**30
        else:
            mem = p.deviceMemoryGiB or 0
            weights_gib = 2 * parameters / 2**30
        free_mib = (0.85 * mem - weights_gib) * 1024
        tokens = min(65536, int(free_mib / per_token_mib) // 1024 * 1024)
        if tokens < 1024:
            continue
        used = weights_gib + tokens * per_token_mib / 1024
        out[p.name] = {"qualifiedTokens": tokens, "memoryGiB": math.ceil(used), "measured": False}
    return out


def catalog_entry_for(info: Any, profiles: Iterable[Any]) -> dict[str, Any] | None:
    """The catalog entry (camelCase mapping) to paste for a supported hub repository,
    pinned to the commit the listing reports; None for an unsupported one."""
    mt = _model_type(info)
    family = FAMILY_OF_MODEL_TYPE.get(mt or "")
    if family is None:
        return None
    sha = _get(info, "sha")
    entry: dict[str, Any] = {
        "repository": _get(info, "id"),
        "family": family,
        "modelType": mt,
    }
    if mt in MULTIMODAL:
        entry["autoClass"] = "AutoModelForImageTextToText"
    params = _parameters(info)
    if params:
        entry["parameters"] = params
    entry["loraTargetModules"] = LM_ONLY_TARGETS if mt in MULTIMODAL else list(TEXT_TARGETS)
    entry.update(_HINTS[family])
    entry["source"] = {"kind": "hub", "revision": sha} if sha else {"kind": "hub"}
    entry["envelope"] = estimate_envelope(params, profiles)
    return entry


def verdict(info: Any, catalog: Catalog) -> tuple[str, str]:
    """``(verdict, reason)`` of the catalog on one hub repository."""
    repo = str(_get(info, "id"))
    entry: CatalogEntry | None = catalog.get(repo)
    if entry is not None:
        return "allowed", f"in the catalog (family {entry.family})"
    mt = _model_type(info)
    family = FAMILY_OF_MODEL_TYPE.get(mt or "")
    if family:
        return "supported", f"family {family} ({mt}); not in the catalog, add it with --catalog"
    if mt:
        return "unsupported", f"model type {mt} is not a family this deployment trains"
    return "unsupported", "no transformers config (a GGUF-only or non-model repository)"


def matching(models: Iterable[Any], author: str, match: str) -> list[Any]:
    """The listed models whose name (after ``author/``) matches the glob ``match``
    (case-insensitive), sorted by repository."""
    out = []
    for m in models:
        rid = str(_get(m, "id"))
        name = rid.split("/", 1)[1] if "/" in rid else rid
        if fnmatch.fnmatch(name.lower(), match.lower()) or fnmatch.fnmatch(
            rid.lower(), match.lower()
        ):
            out.append(m)
    return sorted(out, key=lambda m: str(_get(m, "id")).lower())


def list_hub_models(author: str, limit: int = 1000) -> list[Any]:
    """The hub's listing of ``author``'s models (with config, sizes and commits).

    Raises:
        AkkaError: (502, ``hub_unreachable``) the hub is unreachable (offline deployment, no network); the
            sentence says so.
    """
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        try:
            it = api.list_models(
                author=author,
                limit=limit,
                expand=["config", "safetensors", "sha", "tags", "pipeline_tag"],
            )
        except TypeError:
            it = api.list_models(author=author, limit=limit, full=True)
        return list(it)
    except Exception as exc:
        raise AkkaError(
            hub_failure(f"the repositories of {author}", exc), code="hub_unreachable", status=502
        ) from exc


def candidates(
    models: Iterable[Any], author: str, match: str, catalog: Catalog, profiles: Iterable[Any]
) -> dict[str, Any]:
    """The ``candidates`` answer: one row per matching repository with the verdict, and
    the YAML of catalog entries for the supported ones not yet allowed."""
    rows, entries = [], []
    profiles = list(profiles)
    for m in matching(models, author, match):
        v, reason = verdict(m, catalog)
        rows.append(
            {
                "repository": _get(m, "id"),
                "modelType": _model_type(m),
                "parameters": _parameters(m),
                "commit": _get(m, "sha"),
                "verdict": v,
                "reason": reason,
            }
        )
        if v == "supported":
            e = catalog_entry_for(m, profiles)
            if e is not None:
                entries.append(e)
    text = yaml.safe_dump(entries, sort_keys=False, width=1000) if entries else ""
    return {"author": author, "match": match, "candidates": rows, "catalogYaml": text}
