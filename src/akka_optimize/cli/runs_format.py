"""Text rendering of a run's settings recorded before runs froze their settings text."""

from __future__ import annotations

import json
from typing import Any


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
