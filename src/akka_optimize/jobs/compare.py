"""Compare the training loss of two supervised runs of one configuration.

seeds/001 "Compare two runs" (FEATURES F102): ``training runs compare RUN_ID
BASELINE_RUN_ID`` gives the mean loss difference in each window of updates, lists
gradient spikes, and reports the first full window whose mean difference, in either
direction, is greater than the margin. A run compared with its own replay flags no
window: on CPU a replay is bitwise the same (behaviours.md 6), so every difference is 0.

Windows are aligned on update numbers (``1..w``, ``w+1..2w``, …) and hold the updates
both runs have logged; a window is *full* when it holds all ``w`` of them. A gradient
spike is an update whose gradient norm exceeds ``spike_factor`` times the median of the
run's previous ``w`` updates (at least 3 of them).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import InvalidRequest
from ..plan.hashing import hashed_view
from .views import metrics

DEFAULT_WINDOW = 10
"""Updates per window."""
DEFAULT_MARGIN = 0.02
"""Largest mean loss difference (nats per supervised token) a full window may show
without being reported. Replays on CPU differ by 0; bf16 replays on a GPU differ by
rounding, well under this."""
DEFAULT_SPIKE_FACTOR = 3.0
"""A gradient norm this many times the median of the previous window is a spike."""
MIN_SPIKE_HISTORY = 3


def compare_losses(
    run_metrics: list[dict[str, Any]],
    baseline_metrics: list[dict[str, Any]],
    *,
    window: int = DEFAULT_WINDOW,
    margin: float = DEFAULT_MARGIN,
    spike_factor: float = DEFAULT_SPIKE_FACTOR,
) -> dict[str, Any]:
    """Window-by-window loss difference of ``run_metrics`` against ``baseline_metrics``.

    Args:
        run_metrics, baseline_metrics: per-update records with ``step`` (1-based int),
            ``loss`` (float, nats per supervised token) and ``gradNorm`` (float), as
            ``training runs metrics`` returns them.
        window: updates per window (≥ 1).
        margin: a full window whose |mean difference| exceeds this is reported (≥ 0).
        spike_factor: see the module docstring (> 1).

    Returns:
        ``{"window", "margin", "spikeFactor", "comparedSteps", "fullWindows" (how many
        windows were judged), "windows": [{"first",
        "last", "steps", "full", "runMean", "baselineMean", "meanDifference"}],
        "firstWindowPastMargin": window or None, "spikes": [{"run": "run"|"baseline",
        "step", "gradNorm", "median", "factor"}]}``; ``meanDifference`` is run minus
        baseline.

    Raises:
        InvalidRequest: ``window`` < 1, ``margin`` < 0 or ``spike_factor`` ≤ 1, naming it.
    """
    if window < 1:
        raise InvalidRequest(f"window must be at least 1 update, not {window}.", field="window")
    if not margin >= 0:
        raise InvalidRequest(f"margin must be at least 0, not {margin}.", field="margin")
    if not spike_factor > 1:
        raise InvalidRequest(
            f"spikeFactor must be greater than 1, not {spike_factor}.", field="spikeFactor"
        )
    run = {int(m["step"]): float(m["loss"]) for m in run_metrics}
    base = {int(m["step"]): float(m["loss"]) for m in baseline_metrics}
    common = sorted(run.keys() & base.keys())
    windows: list[dict[str, Any]] = []
    for start in range(1, (common[-1] if common else 0) + 1, window):
        steps = [s for s in common if start <= s < start + window]
        if not steps:
            continue
        run_mean = sum(run[s] for s in steps) / len(steps)
        base_mean = sum(base[s] for s in steps) / len(steps)
        windows.append(
            {
                "first": steps[0],
                "last": steps[-1],
                "steps": len(steps),
                "full": len(steps) == window,
                "runMean": run_mean,
                "baselineMean": base_mean,
                "meanDifference": run_mean - base_mean,
            }
        )
    flagged = next((w for w in windows if w["full"] and abs(w["meanDifference"]) > margin), None)
    spikes = _spikes("run", run_metrics, window, spike_factor) + _spikes(
        "baseline", baseline_metrics, window, spike_factor
    )
    return {
        "window": window,
        "margin": margin,
        "spikeFactor": spike_factor,
        "comparedSteps": len(common),
        "fullWindows": sum(1 for w in windows if w["full"]),
        "windows": windows,
        "firstWindowPastMargin": flagged,
        "spikes": spikes,
    }


def _spikes(
    label: str, metrics: list[dict[str, Any]], window: int, factor: float
) -> list[dict[str, Any]]:
    ordered = sorted(
        (int(m["step"]), float(m["gradNorm"])) for m in metrics if m.get("gradNorm") is not None
    )
    out = []
    for i, (step, grad) in enumerate(ordered):
        history = [g for _, g in ordered[max(0, i - window) : i]]
        if len(history) < MIN_SPIKE_HISTORY:
            continue
        median = statistics.median(history)
        if median > 0 and grad > factor * median:
            out.append(
                {
                    "run": label,
                    "step": step,
                    "gradNorm": grad,
                    "median": median,
                    "factor": round(grad / median, 3),
                }
            )
    return out


def differing_settings(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The settings (dotted paths) whose values differ between two nested dicts, in
    key order; a list or scalar is compared whole. Returns ``[(path, a_value, b_value)]``.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(a.keys() | b.keys()):
            out += differing_settings(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if a == b else [(path, a, b)]


def compare_runs(
    session: Session,
    run: Run,
    baseline: Run,
    *,
    window: int = DEFAULT_WINDOW,
    margin: float = DEFAULT_MARGIN,
    spike_factor: float = DEFAULT_SPIKE_FACTOR,
) -> dict[str, Any]:
    """:func:`compare_losses` over two runs' logged updates, with both run ids.

    Raises:
        InvalidRequest: a run is not supervised, or the two were trained with different
            configurations (the sentence names up to five differing settings).
    """

    if run.id == baseline.id:
        raise InvalidRequest(
            f"Run {run.id} is its own baseline; compare it with another run of its "
            "configuration, such as a replay of its plan.",
            field="baseline",
        )
    for r, field in ((run, "run"), (baseline, "baseline")):
        if r.method not in ("sft", "dpo"):
            raise InvalidRequest(
                f"Run {r.id} is a {r.method} run; runs compare compares supervised and "
                "preference runs.",
                field=field,
            )
    if run.config_hash != baseline.config_hash:
        diffs = differing_settings(hashed_view(run.resolved), hashed_view(baseline.resolved))
        named = (
            "; ".join(f"{p} {json.dumps(a)} vs {json.dumps(b)}" for p, a, b in diffs[:5])
            or "the configuration hash"
        )
        more = f" and {len(diffs) - 5} more" if len(diffs) > 5 else ""
        raise InvalidRequest(
            f"Runs {run.id} and {baseline.id} were trained with different configurations "
            f"({named}{more}); runs compare compares runs of one configuration.",
            field="baseline",
        )
    ours, theirs = metrics(session, run)["metrics"], metrics(session, baseline)["metrics"]
    result = compare_losses(ours, theirs, window=window, margin=margin, spike_factor=spike_factor)
    if run.method == "dpo":  # a preference run: each window's mean reward accuracy too
        for w in result["windows"]:
            for key, rows in (("runAccuracy", ours), ("baselineAccuracy", theirs)):
                got = [m["rewards/accuracy"] for m in rows if w["first"] <= m["step"] <= w["last"] and "rewards/accuracy" in m]  # fmt: skip
                w[key] = statistics.fmean(got) if got else None
    return {"run": run.id, "baseline": baseline.id, "configHash": run.config_hash, **result}
