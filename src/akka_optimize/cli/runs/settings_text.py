"""Text rendering of a run's settings recorded before runs froze their settings text."""

from __future__ import annotations

import json
from typing import Any

from ..output import console, print_kv


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(d, dict):
        out: list[tuple[str, Any]] = []
        for k, v in d.items():
            out.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, d)]


def settings_lines(settings: dict[str, Any]) -> list[str]:
    """``group: key=value, …`` lines for the resolved plan's groups."""
    cfg = settings.get("config", {})
    groups: list[tuple[str, Any]] = []
    for name, val in (cfg.get("hyperparams") or {}).items():
        groups.append((f"hyperparams.{name}", val))
    for name in ("model", "data", "loss", "engineSettings"):
        if name in cfg:
            groups.append((name, cfg[name]))
    if "maxSeqLength" in cfg:
        groups.append(("maxSeqLength", cfg["maxSeqLength"]))
    groups.append(("execution", settings.get("execution", {})))
    lines = []
    for name, val in groups:
        if isinstance(val, dict):
            pairs = " ".join(f"{k}={json.dumps(v)}" for k, v in _flatten(val))
            lines.append(f"{name}: {pairs}")
        else:
            lines.append(f"{name}: {json.dumps(val)}")
    return lines


def fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def print_run(run: dict[str, Any], wide: bool) -> None:
    """A run in three parts: state, results and cost (seeds/001)."""
    c = run["cost"]
    console.print("[bold]State[/bold]")
    print_kv(_state_pairs(run))
    console.print("[bold]Results[/bold]")
    print_kv(_result_pairs(run))
    console.print("[bold]Cost[/bold]")
    print_kv(
        [
            ("Device", c["device"]),
            ("Wall time", f"{c['wallSeconds']}s"),
            ("Device time", f"{c['deviceSeconds']}s"),
            ("Trained tokens", c.get("trainedTokens")),
        ]
    )
    if wide and run.get("settings"):
        console.print("[bold]Settings[/bold] (* = stated by the plan)")
        for line in run["settings"].get("settingsText") or settings_lines(run["settings"]):
            console.print(line, highlight=False, markup=False)


def _state_pairs(run: dict[str, Any]) -> list[tuple[str, Any]]:
    """The State part of ``runs get``: identity, phase, inputs, reward and claims."""
    return [
        ("Run", run["id"]),
        ("Project", run["project"]),
        ("State", run["state"]),
        *[
            (label, run.get(key))
            for label, key in (
                ("Phase", "phase"),
                ("Queue reason", "queueReason"),
                ("Failure", "failure"),
            )
            if run.get(key)
        ],
        ("Base model", run["baseModel"]),
        ("Dataset", run["dataset"]),
        ("Validation dataset", run.get("validationDataset")),
        (
            "Branch from",
            "{run} at {snapshot}".format(**run["branchFrom"]) if run.get("branchFrom") else None,
        ),
        *([("Warm start", run["warmStartModelId"])] if run.get("warmStartModelId") else []),
        *_recipe_pairs(run.get("recipe")),
        *(
            [
                ("Reward", run.get("reward")),
                *([("Judge", run["judge"])] if run.get("judge") else []),
                *(
                    [
                        ("Judge instructions", run.get("graderInstructions")),
                        ("Instructions source", run.get("instructionsSource")),
                    ]
                    if run.get("judge")
                    else []
                ),
            ]
            if run.get("method") == "rl"
            else []
        ),
        *(
            [
                (
                    "Claims",
                    "; ".join(
                        f"{cl['for']}: {cl['devices']} {cl['pool']} device"
                        + ("" if cl["devices"] == 1 else "s")
                        for cl in run["claims"]
                    ),
                )
            ]
            if run.get("claims")
            else []
        ),
        ("Config hash", run["configHash"][:16] if run.get("configHash") else None),
    ]


def _recipe_pairs(c: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """A recipe run's computation, identity and outputs (``method`` ``recipe``)."""
    if not c:
        return []
    return [
        ("Computation", f"{c['strategy']} {c['computation']} ({c['implementation']})"),
        ("Computation identity", c["computationIdentity"]),
        *[
            (label, c[key])
            for label, key in (
                ("Worker", "worker"),
                ("Final weights", "final"),
                ("Export", "export"),
            )
            if c.get(key)
        ],
    ]


def _result_pairs(run: dict[str, Any]) -> list[tuple[str, Any]]:
    """The Results part of ``runs get``: model, steps and saves, losses, readings."""
    r = run["results"]
    return [
        ("Model", r.get("model")),
        ("Step", f"{r.get('step')}/{r.get('totalSteps') or '?'}"),
        ("Last saved step", r.get("lastSavedStep")),
        *(
            [("Unrecorded saves", ", ".join(f"step {n}" for n in r["unrecordedSaves"]))]
            if r.get("unrecordedSaves")
            else []
        ),
        *(
            [("Rows tokenized", f"{r['preparing']['rowsDone']}/{r['preparing']['rowsTotal']}")]
            if r.get("preparing") and run.get("state") == "PREPARING"
            else []
        ),
        *(
            [("Reward", f"{fmt(r.get('rewardStart'))} -> {fmt(r.get('rewardFinal'))}")]
            if r.get("rewardStart") is not None
            else []
        ),
        *([("Smoke check", _smoke(r["smoke"]))] if r.get("smoke") else []),
        *(  # the checks before the first update (runs get --checks lists each)
            [("Checks", "passed" if r["checksPassed"] else "failed")]
            if r.get("checksPassed") is not None
            else []
        ),
        ("Final loss", fmt(r.get("finalLoss"))),
        ("Mean loss", fmt(r.get("meanLoss"))),
        ("Validation loss", fmt(r.get("validationLoss"))),
        ("Tokens/s", fmt(r.get("tokensPerSecond"))),
        ("Adapted modules", _modules(r.get("adaptedModules") or [])),
        ("Warnings", " | ".join(w.get("message", "") for w in r.get("warnings") or []) or None),
    ]


def _modules(names: list[str] | int) -> str | None:
    """Full module paths, shortened past three (``-o json`` lists every one); a count
    alone for a Tinker run recorded before its worker sent the paths."""
    if isinstance(names, int):
        return str(names)
    if len(names) <= 3:
        return ", ".join(names) or None
    return f"{len(names)}: {', '.join(names[:2])} and {len(names) - 2} more (-o json lists all)"


def _smoke(reading: dict[str, Any]) -> str:
    """A smoke run's reading: ``REPRODUCED: 0.952 of 311 supervised tokens at step 20
    (threshold 0.9, 8 rows)``; while it trains, the reading so far."""
    head = reading.get("reading") or "measuring"
    limits = f"threshold {reading.get('threshold')}"
    if reading.get("rows"):
        limits += f", {reading['rows']} rows"
    return (
        f"{head}: {fmt(reading.get('reproduction'))} of {reading.get('supervisedTokens')} "
        f"supervised tokens at step {reading.get('step')} ({limits})"
    )
