"""First-loss sanity (DATA-AND-TRAINING-RULES.md §2 rule 10, "Expected initial loss").

A pretrained model doing supervised fine-tuning starts at a loss of about 0.5–2.0 per
token; above 3.0 is wrong, and near log(vocabulary) (≈12 for a 262K vocabulary) is
random prediction. The check only warns: it never changes the loss or stops the run.
"""

from __future__ import annotations

import math
from typing import Any

HIGH_FIRST_LOSS = 3.0
"""A first loss above this (nats per supervised token) is not what a pretrained model gives."""
NEAR_UNIFORM = 0.75
"""A first loss at or above this fraction of log(vocabulary) is called near random prediction."""
LIKELY_CAUSES = (
    "the loss mask supervises tokens it should not (check `training data preview`)",
    "the base weights are random, truncated or wrongly converted (a tiny test model "
    "starts near log(vocabulary) by design)",
    "LoRA targets outside the language model (a vision or audio tower), see the run's "
    "adaptedModules",
)


def first_loss_warning(loss: float, vocab_size: int, step: int = 1) -> dict[str, Any] | None:
    """The ``warning`` event for a fresh run's first update, or None when its loss is sane.

    Args:
        loss: the first update's loss, nats per supervised token.
        vocab_size: rows of the output head (log of it is the loss of uniform guessing).

    Returns:
        ``{"type": "warning", "code": "first_loss_high", "step", "loss", "logVocab",
        "message", "likelyCauses"}``, or None at or below 3.0.
    """
    log_v = math.log(vocab_size) if vocab_size > 1 else 0.0
    near = log_v > 0 and loss >= NEAR_UNIFORM * log_v
    if loss <= HIGH_FIRST_LOSS and not near:
        return None
    what = (
        f"near log(vocabulary) = {log_v:.2f}, the loss of random prediction"
        if near
        else f"above {HIGH_FIRST_LOSS}, where a pretrained model starts at about 0.5–2.0"
    )
    return {
        "type": "warning",
        "code": "first_loss_high",
        "step": step,
        "loss": loss,
        "logVocab": log_v,
        "message": f"The first update's loss is {loss:.3f}, {what}. Likely causes: "
        + "; ".join(LIKELY_CAUSES)
        + ". The loss is reported as measured.",
        "likelyCauses": list(LIKELY_CAUSES),
    }
