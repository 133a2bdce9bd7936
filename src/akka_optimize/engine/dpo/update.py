"""One preference update on a :class:`~akka_optimize.engine.session.training.TrainingSession`
(issue 50 item 3).

A pass packs whole pairs: the preferred and non-preferred conversation of each pair sit
next to each other in one packed sequence (``position_ids`` restart per conversation, as a
supervised pass packs conversations), so a pair is never split across passes, updates or
ranks. Each pass runs:

1. the **reference** forward: the same base weights with the adapter disabled (PEFT's
   ``disable_adapter()``; no second model in memory), under ``no_grad``, giving each
   answer's sequence log-probability (the sum over its scored tokens);
2. the **policy** forward with the adapter on, keeping the graph of the body; the output
   head is run over the scored positions in chunks without a graph to get the policy's
   sequence log-probabilities;
3. the pair losses (:func:`akka_optimize.engine.dpo.loss.pair_losses`) and their gradient
   with respect to each sequence log-probability; since a sequence log-probability is a
   sum over its tokens, each scored token's gradient is its sequence's, and the head is
   back-propagated in chunks with that per-token weight
   (:func:`akka_optimize.engine.head.chunked_loss`), so at most one chunk of logits is
   alive. The gradient is exactly that of the loss (the chain rule through a sum).

The update's loss is the **sum** of its pairs' losses; ``optim_step`` divides the loss and
the gradients by the update's pairs (counted in the session's ``supervised`` slot), so the
update minimises the mean pair loss, as TRL does over a batch. Ranks sum their sums first.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ...data.types import Pass, PreferencePair, pack_examples
from .. import distributed as D
from ..attention import SEGMENTS_KWARG
from ..head import chunked_loss, head_logprobs
from .loss import DpoSettings, pair_losses, reward_sums

REWARD_KEYS = ("rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy")
"""The reward metrics of an update or a validation, each a mean over pairs."""


@dataclass
class PairSums:
    """What passes of pairs add up to: summed pair loss, the four reward sums of
    :func:`reward_sums`, pairs, scored (answer) tokens and all tokens."""

    loss: float = 0.0
    rewards: list[float] = field(default_factory=lambda: [0.0] * 4)
    pairs: int = 0
    supervised: int = 0
    tokens: int = 0

    def add(self, other: PairSums) -> None:
        """Add ``other``'s sums to these."""
        self.loss += other.loss
        self.rewards = [a + b for a, b in zip(self.rewards, other.rewards, strict=True)]
        self.pairs += other.pairs
        self.supervised += other.supervised
        self.tokens += other.tokens

    def over_ranks(self) -> PairSums:
        """These sums added over every rank (one all-reduce; as they are on one rank)."""
        v = D.all_sum([self.loss, *self.rewards, self.pairs, self.supervised, self.tokens])
        return PairSums(v[0], v[1:5], int(v[5]), int(v[6]), int(v[7]))

    def metrics(self) -> dict[str, float]:
        """``rewards/chosen``, ``rewards/rejected``, ``rewards/margin`` (means over pairs)
        and ``rewards/accuracy`` (share of pairs whose chosen reward is the larger)."""
        n = max(self.pairs, 1)
        return {k: v / n for k, v in zip(REWARD_KEYS, self.rewards, strict=True)}


def pair_pass(pairs: list[PreferencePair]) -> Pass:
    """The packed pass of ``pairs``: chosen₁, rejected₁, chosen₂, rejected₂, …"""
    return pack_examples([ex for p in pairs for ex in (p.chosen, p.rejected)])


def pair_passes(pairs: list[PreferencePair], micro_batch: int) -> list[list[PreferencePair]]:
    """``pairs`` in groups of ``micro_batch`` whole pairs, one group per pass."""
    return [pairs[i : i + micro_batch] for i in range(0, len(pairs), micro_batch)]


def _sequence_logps(
    session: Any, p: Pass, idx_S: Tensor, seq_S: Tensor, graph: bool
) -> tuple[Tensor, Tensor | None]:
    """([2P] float64 sequence log-probabilities, the gathered hidden states [S, H] with the
    body's graph when ``graph``, else None)."""
    dev = session.device
    inputs = {
        name: torch.tensor(values, dtype=torch.long)[None].to(dev)
        for name, values in (("input_ids", p.input_ids), ("position_ids", p.position_ids))
    }
    if session._packed_attention:  # each conversation attends within itself
        inputs[SEGMENTS_KWARG] = list(p.cu_seqlens)
    hidden = session._body(**inputs, attention_mask=None, use_cache=False).last_hidden_state[0]
    hidden_S = hidden.index_select(0, idx_S.to(dev))
    targets_S = torch.tensor(p.input_ids, dtype=torch.long)[1:][idx_S].to(dev)
    chunk = session.cfg.head_chunk_tokens
    with torch.no_grad():
        lp_S = torch.cat(
            [
                head_logprobs(
                    session._head, hidden_S[i : i + chunk], targets_S[i : i + chunk], session._cap
                )  # fmt: skip
                for i in range(0, hidden_S.shape[0], chunk)
            ]
        ).double()
    seq = torch.zeros(len(p.cu_seqlens) - 1, dtype=torch.float64, device=dev)
    seq.index_add_(0, seq_S.to(dev), lp_S)
    return seq, hidden_S if graph else None


def run_pairs(
    session: Any, pairs: list[PreferencePair], s: DpoSettings, backward: bool
) -> PairSums:
    """Reference and policy forward over one pass of ``pairs`` (module docstring); with
    ``backward`` the gradient of the summed pair loss accumulates into the adapter.

    Returns:
        The pass's :class:`PairSums`."""
    if not pairs:
        return PairSums()
    p = pair_pass(pairs)
    w_T = torch.tensor(p.weights, dtype=torch.float32)
    idx_S = (w_T[1:] != 0).nonzero().squeeze(1)  # hidden position t predicts token t+1
    starts = torch.tensor(p.cu_seqlens[1:-1], dtype=torch.long)
    seq_S = torch.bucketize(idx_S + 1, starts, right=True)  # the conversation of each target
    answer = torch.bincount(seq_S, minlength=2 * len(pairs)).double().view(-1, 2)
    with session.compute_context():
        with torch.no_grad(), session.model.disable_adapter():
            ref, _ = _sequence_logps(session, p, idx_S, seq_S, graph=False)
        with contextlib.nullcontext() if backward else torch.no_grad():
            pol, hidden_S = _sequence_logps(session, p, idx_S, seq_S, graph=backward)
        ref_P2, pol_P2 = ref.view(-1, 2), pol.detach().view(-1, 2).requires_grad_(backward)
        losses = pair_losses(pol_P2, ref_P2, answer.to(ref.device), s)
        if backward:
            losses.sum().backward()
            coef_S = pol_P2.grad.reshape(-1)[seq_S.to(ref.device)]
            targets_S = torch.tensor(p.input_ids, dtype=torch.long)[1:][idx_S].to(ref.device)
            chunked_loss(
                session._head,
                hidden_S,
                targets_S,
                session._cap,
                session.cfg.head_chunk_tokens,
                lambda lp, sl: (coef_S[sl] * lp).sum(),
                backward=True,
            )
    return PairSums(
        float(losses.detach().sum()),
        reward_sums(pol_P2.detach(), ref_P2, s.beta),
        len(pairs),
        int(idx_S.numel()),
        p.num_tokens,
    )


def train_update(
    session: Any, passes: list[list[PreferencePair]], s: DpoSettings
) -> dict[str, float | int]:
    """Forward, backward and one AdamW update over this rank's ``passes`` of an update.

    Returns:
        ``optim_step``'s metrics (``loss`` is the mean pair loss, ``gradNorm``,
        ``gradClipFactor``, ``adapterNorm``, ``updateRatio``, ``learningRate``,
        ``totalTokens``, ``tokensPerSecond``…), ``supervisedTokens`` (answer tokens),
        ``pairs`` and the :data:`REWARD_KEYS` over the whole update (every rank).

    Raises:
        EngineError: an update with no pair, or a non-finite loss (``optim_step``).
    """
    session.model.train()
    pend = session._pending
    if pend.started is None:
        pend.started = time.perf_counter()
    sums = PairSums()
    for group in passes:
        sums.add(run_pairs(session, group, s, backward=True))
    pend.loss_sum += sums.loss
    pend.supervised += sums.pairs  # optim_step divides by the update's pairs
    pend.tokens += sums.tokens
    total = sums.over_ranks() if session.world > 1 else sums
    metrics = session.optim_step()
    metrics["pairs"] = metrics.pop("supervisedTokens")
    metrics["supervisedTokens"] = total.supervised
    metrics.update(total.metrics())
    return metrics


def score_pairs(
    session: Any, pairs: list[PreferencePair], s: DpoSettings, micro_batch: int
) -> PairSums:
    """The sums over ``pairs`` without gradients, in eval mode (validation); on several
    ranks each rank scores its share and the sums are added over the ranks."""
    share = D.rank_share(pairs, session.rank, session.world)
    session.model.eval()
    sums = PairSums()
    try:
        for group in pair_passes(share, micro_batch):
            sums.add(run_pairs(session, group, s, backward=False))
    finally:
        session.model.train()
    return sums.over_ranks() if session.world > 1 else sums
