"""What an evaluation's worker reports: the summary of its scores and one record per example.

:func:`summary` (mean, standard error, counts; a curation's worker uses it too),
:func:`_records` (the examples file's lines) and :func:`_result` (an evaluation's summary, a
comparison's paired difference or a sweep's fan) for
:func:`akka_optimize.evals.worker.evaluate`.
"""

from __future__ import annotations

import math
from typing import Any

from .stats import paired


def summary(scores: list[float | None]) -> dict[str, Any]:
    """Mean score with its standard error over the examples that scored.

    Args:
        scores: one entry per example; None marks an example error.

    Returns:
        ``{"mean", "stderr", "count", "scored", "errors", "errorShare"}``: ``stderr`` is the
        sample standard deviation over ``sqrt(scored)`` (None below two scored examples);
        ``mean`` is None when nothing scored.
    """
    ok = [s for s in scores if s is not None]
    n = len(ok)
    mean = sum(ok) / n if n else None
    stderr = None
    if n >= 2 and mean is not None:
        var = sum((s - mean) ** 2 for s in ok) / (n - 1)
        stderr = math.sqrt(var / n)
    errors = len(scores) - n
    return {
        "mean": mean,
        "stderr": stderr,
        "count": len(scores),
        "scored": n,
        "errors": errors,
        "errorShare": errors / len(scores) if scores else 0.0,
    }


def summary_records(
    examples: list[Any], answers: list[list[str | None]], per_side: list[list[Any]]
) -> list[dict[str, Any]]:
    """One record per example: prompt, ground truth, and each side's answer, score,
    details and error (suffix ``A``/``B`` for a comparison, the side's index for a fan)."""
    records = []
    for ex in examples:
        rec: dict[str, Any] = {
            "index": ex.index,
            "prompt": ex.prompt,
            "groundTruth": ex.ground_truth,
        }
        for i, g in enumerate(per_side):
            got = g[ex.index]
            suffix = "" if len(per_side) == 1 else "AB"[i] if len(per_side) == 2 else str(i)
            rec[f"answer{suffix}"] = answers[i][ex.index]
            rec[f"score{suffix}"] = got.score
            rec[f"details{suffix}"] = got.details
            rec[f"error{suffix}"] = got.error
        records.append(rec)
    return records


def summary_result(ev: dict[str, Any], per_side: list[list[Any]]) -> dict[str, Any]:
    """The summary: an evaluation's, a comparison's paired difference (with each side's
    summary), or a sweep's fan (every branch against the source snapshot, side 0)."""

    scores = [[g.score for g in got] for got in per_side]
    if ev.get("fan"):
        return {
            "baseline": summary(scores[0]),
            "fan": [{**summary(s), "vsSource": paired(s, scores[0])} for s in scores[1:]],
        }
    if len(per_side) == 1:
        return summary(scores[0])
    result = paired(scores[0], scores[1])
    result["candidate"] = summary(scores[0])
    result["baseline"] = summary(scores[1])
    return result
