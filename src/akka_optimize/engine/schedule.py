"""Learning-rate schedules as a pure function of the update number.

No torch scheduler object: the factor depends only on ``(update, total)``, so a
resumed run gets the same rate from its step alone (behaviours.md 6).
"""

from __future__ import annotations

import math


def warmup_updates(total: int, warmup_ratio: float) -> int:
    """Updates spent warming up: ``ceil(warmup_ratio × total)``, at most ``total``."""
    return min(total, math.ceil(warmup_ratio * total - 1e-9))


def lr_factor(
    kind: str, update: int, total: int, warmup_ratio: float = 0.0, min_ratio: float = 0.0
) -> float:
    """The fraction of the peak learning rate used by 1-based ``update`` of ``total``.

    Warmup: update k ≤ W uses k / W (never 0, so no update is wasted). After warmup
    the progress p = (k − W − 1) / (total − W − 1) runs from 0 at the first update
    after warmup to 1 at the last, and

    - ``constant``: 1;
    - ``linear``: m + (1 − m)(1 − p);
    - ``cosine``: m + (1 − m)·½(1 + cos πp);

    with m = ``min_ratio``, so the last update runs at exactly ``min_ratio`` × peak
    (a lone update after warmup runs at the peak, so a one-update run still learns).

    Raises:
        ValueError: unknown ``kind`` or ``update`` outside 1..total.
    """
    if not 1 <= update <= total:
        raise ValueError(f"update {update} is outside 1..{total}")
    w = warmup_updates(total, warmup_ratio)
    if update <= w:
        return update / w
    if kind == "constant":
        return 1.0
    span = total - w - 1
    p = 0.0 if span <= 0 else (update - w - 1) / span
    if kind == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - p)
    if kind == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown schedule {kind!r}; use constant, linear or cosine")
