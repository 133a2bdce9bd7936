"""The dry-run report: resolved settings one line per group (stated values marked), the
configuration hash and the pinned references; a refused plan reports every refusal
through :class:`~akka_optimize.plan.refusals.PlanRefused` instead.

seeds/001 "Set the training engine's settings directly": ``training runs start
--dry-run --show-resolved`` shows the settings "after the engine, one line per group.
For a supervised run, they also show the data types used for training. Explicit data
types and data.use_dynamic_bsz set to false appear on the relevant lines and are omitted
from the settings list."
"""

from __future__ import annotations

from typing import Any

from ..engine_settings import BY_KEY, GROUP_ORDER
from .resolve import ResolvedPlan

STATED_MARK = "*"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return ",".join(_fmt(x) for x in v)
    return str(v)


def _line(group: str, items: list[tuple[str, str, Any]], stated: set[str]) -> dict[str, Any]:
    """One settings line: ``items`` are (label, plan path, value)."""
    values = [
        {"key": label, "path": path, "value": value, "stated": path in stated}
        for label, path, value in items
    ]
    text = " ".join(
        f"{v['key']}={_fmt(v['value'])}{STATED_MARK if v['stated'] else ''}" for v in values
    )
    return {"group": group, "text": f"{group}: {text}", "values": values}


def _group(group: str, base: str, d: dict[str, Any] | None, stated: set[str]) -> dict[str, Any]:
    items = [(k, f"{base}.{k}", v) for k, v in (d or {}).items() if not isinstance(v, dict)]
    return _line(group, items, stated)


def _hyperparam_lines(r: ResolvedPlan, stated: set[str]) -> list[dict[str, Any]]:
    cfg = r.plan["config"]
    key = {"rl": "rlHyperparams", "dpo": "dpoHyperparams"}.get(r.method, "hyperparams")
    hp = cfg[key]
    base = f"config.{key}"
    lines = [_group(g, f"{base}.{g}", hp[g], stated) for g in ("lora", "optimizer", "scheduler")]
    if r.method in ("rl", "dpo"):
        loop = {k: v for k, v in hp.items() if not isinstance(v, dict)}
        lines.append(_group("loop", base, loop, stated))
    else:
        lines.append(_group("training", f"{base}.training", hp["training"], stated))
    lines.append(
        _line(
            "maxSeqLength", [("maxSeqLength", "config.maxSeqLength", cfg["maxSeqLength"])], stated
        )
    )
    return lines


def _data_line(r: ResolvedPlan, stated: set[str]) -> dict[str, Any]:
    data = dict(r.plan["config"]["data"])
    line = _group("data", "config.data", data, stated)
    if data["use_dynamic_bsz"] is False:
        line["text"] += " (one conversation per pass)"
    return line


def _dtypes_line(r: ResolvedPlan, stated: set[str]) -> dict[str, Any]:
    cfg = r.plan["config"]
    engine = cfg["engineSettings"]
    items: list[tuple[str, str, Any]] = [
        ("compute", "config.model.precision", cfg["model"]["precision"]),
        ("weights", "config.model.weightPrecision", cfg["model"]["weightPrecision"]),
    ]
    for key in ("dtypes.compute", "dtypes.reduce", "dtypes.buffer"):
        path = f"config.engineSettings.{key}"
        if key not in engine or (key == "dtypes.compute" and path not in stated):
            continue
        label = key.split(".", 1)[1]
        items = [(lbl, p, v) if lbl != label else (label, path, engine[key]) for lbl, p, v in items]
        if all(lbl != label for lbl, _, _ in items):
            items.append((label, path, engine[key]))
    return _line("data types", items, stated)


def _engine_lines(r: ResolvedPlan, stated: set[str]) -> list[dict[str, Any]]:
    engine = r.plan["config"]["engineSettings"]
    lines = []
    for group in GROUP_ORDER:
        if group == "dtypes":
            continue
        items = [
            (k, f"config.engineSettings.{k}", v)
            for k, v in engine.items()
            if k in BY_KEY and BY_KEY[k].group == group
        ]
        if items:
            lines.append(_line(f"engine settings: {group}", items, stated))
    return lines


def settings_lines(r: ResolvedPlan) -> list[dict[str, Any]]:
    """The resolved settings, one line per group, stated values marked with ``*``.

    Returns:
        A list of ``{group, text, values: [{key, path, value, stated}]}`` in display order:
        hyperparameter groups, model, data, loss, execution, memory, the engine (after
        which its settings, one line per group) and, for a supervised run, data types.
    """
    stated = set(r.stated)
    cfg = r.plan["config"]
    ex = r.plan["execution"]
    lines = _hyperparam_lines(r, stated)
    lines.append(_group("model", "config.model", cfg["model"], stated))
    lines.append(_data_line(r, stated))
    if cfg["loss"] is not None:
        lines.append(_group("loss", "config.loss", cfg["loss"], stated))
    plain = {k: v for k, v in ex.items() if k not in ("memory", "rollout")}
    lines.append(_group("execution", "execution", plain, stated))
    if ex["memory"] is not None:
        mem = {f"offload.{k}": v for k, v in ex["memory"]["offload"].items()}
        mem["sharding"] = ex["memory"]["sharding"]
        lines.append(_group("memory", "execution.memory", mem, stated))
    if ex["rollout"] is not None:
        lines.append(_group("rollout", "execution.rollout", ex["rollout"], stated))
    lines.extend(_engine_lines(r, stated))
    if r.method == "sft":
        lines.append(_dtypes_line(r, stated))
    return lines


def dry_run_report(r: ResolvedPlan, findings: Any = None) -> dict[str, Any]:
    """The body of ``POST /v1/training/runs?dryRun=true`` for an accepted plan.

    Args:
        r: the resolved plan.
        findings: dataset findings for the pinned training dataset, or None when the
            deployment cannot compute them.
    """
    return {
        "dryRun": True,
        "accepted": True,
        "configHash": r.config_hash,
        "project": r.project,
        "baseModel": r.plan["baseModel"],
        "modelName": r.plan["modelName"],
        "method": r.method,
        "deviceProfile": r.device_profile.name,
        "pinned": r.pinned,
        "stated": r.stated,
        "settings": settings_lines(r),
        "refusals": [],
        "findings": findings,
        "resolved": r.plan,
    }
