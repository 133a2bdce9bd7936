"""Paired statistics of a comparison: two models' scores on the same examples.

A comparison scores the candidate (A) and the baseline (B) on the same rows with the same
grader, so the difference is measured per example (a paired design): the mean of
``d_i = a_i − b_i`` with the Student-t confidence interval ``d̄ ± t(0.975, n−1)·s_d/√n``,
where ``s_d`` is the sample standard deviation of the differences. An example where
either side could not be scored is left out of the pairs and counted in ``errors``.
"""

from __future__ import annotations

import math
from typing import Any

#: Two-sided 95% quantiles t(0.975, df) of Student's t distribution for df = 1…30
#: (standard tables, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2); above 30 the normal 1.96.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (df ≥ 1)."""
    return T975[df - 1] if df <= len(T975) else 1.96


def paired(a: list[float | None], b: list[float | None], tie: float = 1e-9) -> dict[str, Any]:
    """Wins, losses, ties and the mean score difference of A over B with its 95% CI.

    Args:
        a / b: per-example scores of the candidate and the baseline, in the same order;
            None marks an example error.
        tie: differences within this are ties.

    Returns:
        ``{"wins", "losses", "ties", "pairs", "errors", "meanDifference", "ci95"}``: ``ci95``
        is ``[low, high]`` (None below two pairs); ``meanDifference`` None without pairs.

    Raises:
        ValueError: ``a`` and ``b`` have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} candidate scores but {len(b)} baseline scores")
    diffs = [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    n = len(diffs)
    wins = sum(d > tie for d in diffs)
    losses = sum(d < -tie for d in diffs)
    mean = sum(diffs) / n if n else None
    ci = None
    if n >= 2 and mean is not None:
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        ci = [mean - half, mean + half]
    return {
        "wins": wins,
        "losses": losses,
        "ties": n - wins - losses,
        "pairs": n,
        "errors": len(a) - n,
        "meanDifference": mean,
        "ci95": ci,
    }
