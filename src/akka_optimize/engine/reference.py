"""The reference check: the engine scores what the model itself scores (F096).

The engine never calls the model's own forward while training: it runs the body over
packed passes (per-conversation attention, engine/attention.py), gathers the hidden
states of supervised positions and projects them with the output head in chunks,
applying final-logit soft-capping itself (engine/head.py). Each of these is a place
where a family's particulars (soft-capping kept in ``text_config``, scaled embeddings,
sliding-window layers, attention soft-caps, per-layer inputs) could make the engine's
log-probs differ from the model's. This check compares the two directly: the log-probs
of :meth:`TrainingSession.forward` over the passes training would run, against
``log_softmax(model(input_ids).logits)`` in float32 for each conversation alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data.types import Example, Pass
from .session.passes import vision_tensors
from .session.training import TrainingSession

REFERENCE_TOLERANCE = 1e-4
"""Largest absolute log-prob difference the check allows (float32 compute)."""


@dataclass(frozen=True)
class ReferenceCheck:
    """What :func:`reference_check` measured.

    Attributes:
        max_error: largest |engine − model| log-prob (nats) at a supervised position.
        positions: supervised positions compared.
        worst_row: the ``row`` of the conversation holding ``max_error`` (None: nothing compared).
        tolerance: the bound ``ok`` tests against.
    """

    max_error: float
    positions: int
    worst_row: int | None
    tolerance: float

    @property
    def ok(self) -> bool:
        """Whether every compared position is within ``tolerance``."""
        return self.max_error <= self.tolerance


def model_logprobs(session: TrainingSession, example: Example) -> torch.Tensor:
    """log p(input_ids[t] | input_ids[:t]) from the model's own forward, float32 [L]
    (0.0 at position 0), for one conversation alone, adapter included, in eval mode; an
    image row with its vision inputs."""

    ids = torch.tensor(example.input_ids, dtype=torch.long)[None].to(session.device)
    vision = vision_tensors(example.vision, session.device, session.weight_dtype)
    with session.compute_context():
        logits = session.model(input_ids=ids, use_cache=False, **vision).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
    return torch.cat([torch.zeros(1, device=lp.device), lp]).cpu()


@torch.no_grad()
def reference_check(
    session: TrainingSession,
    passes: list[Pass],
    examples: list[Example],
    *,
    tolerance: float = REFERENCE_TOLERANCE,
) -> ReferenceCheck:
    """Compare the engine's log-probs over ``passes`` with the model's own forward.

    Args:
        passes: the passes training runs (packed as :func:`engine.sft.passes_of` packs).
        examples: the conversations in them, found by ``row`` (rows must be unique).

    Returns:
        The largest difference at supervised positions (non-zero weight, first token of
        each conversation excluded).
    """
    by_row = {ex.row: ex for ex in examples}
    res = session.forward(passes)
    was_training = session.model.training
    session.model.eval()
    worst, worst_row, positions = 0.0, None, 0
    try:
        for p, lp_T in zip(passes, res.logprobs, strict=True):
            for row, a, b in zip(p.rows, p.cu_seqlens[:-1], p.cu_seqlens[1:], strict=True):
                ex = by_row[row]
                mask = torch.tensor(ex.weights) != 0
                mask[0] = False
                if not mask.any():
                    continue
                diff = (lp_T[a:b][mask] - model_logprobs(session, ex)[mask]).abs().max().item()
                positions += int(mask.sum())
                if diff > worst or worst_row is None:
                    worst, worst_row = max(diff, worst), row
    finally:
        session.model.train(was_training)
    return ReferenceCheck(worst, positions, worst_row, tolerance)
