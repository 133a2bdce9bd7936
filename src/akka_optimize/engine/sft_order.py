"""Which rows each update of a supervised run holds, and the passes that train them.

Every conversation trains every epoch, in an order shuffled per epoch from the seed
(:func:`epoch_order`), so the rows of any update follow from its number alone
(:func:`update_passes`) and a resumed run sees the same rows in the same order
(behaviours.md 6). :func:`passes_of` packs rows into passes; :func:`total_updates` counts
a run's updates.
"""

from __future__ import annotations

import random

from ..data.packing import pack
from ..data.types import Example, Pass, pack_examples
from .config import EngineConfig
from .distributed import rank_share


def epoch_order(rows: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """Row indices of 1-based ``epoch``: a permutation seeded by (seed, epoch), or 0..rows-1."""
    order = list(range(rows))
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def update_rows(train: list[Example], cfg: EngineConfig, update: int) -> list[Example]:
    """The conversations of 1-based ``update`` over every rank, in order."""
    epoch, k = divmod(update - 1, cfg.updates_per_epoch(len(train)))
    n = cfg.conversations_per_update
    order = epoch_order(len(train), cfg.seed, epoch + 1, cfg.shuffle)[k * n : (k + 1) * n]
    return [train[i] for i in order]


def update_passes(
    train: list[Example], cfg: EngineConfig, update: int, rank: int = 0, size: int = 1
) -> tuple[int, bool, list[Pass]]:
    """(epoch, whether it ends the epoch, packed passes) of 1-based ``update``; on several
    ranks, the passes of ``rank``'s share of the update's conversations
    (:func:`akka_optimize.engine.distributed.rank_share`: a contiguous share, so an update
    smaller than the ranks, the epoch's remainder, still trains every conversation)."""
    per_epoch = cfg.updates_per_epoch(len(train))
    k = (update - 1) % per_epoch
    passes = passes_of(rank_share(update_rows(train, cfg, update), rank, size), cfg)
    if cfg.pad_bucket:
        passes = [pad_pass(p, cfg.pad_bucket) for p in passes]
    return (update - 1) // per_epoch + 1, k == per_epoch - 1, passes


def pad_pass(p: Pass, bucket: int) -> Pass:
    """``p`` padded to a multiple of ``bucket`` tokens (``engine.pad_to_length``) with one
    more sequence of token 0, weight 0 and its own positions, so it changes no loss: packed
    sequences attend only within themselves (the engine's packed attention)."""
    extra = -len(p.input_ids) % bucket
    if not extra:
        return p
    return Pass(
        p.input_ids + [0] * extra,
        p.weights + [0.0] * extra,
        p.position_ids + list(range(extra)),
        p.cu_seqlens + [p.cu_seqlens[-1] + extra],
        list(p.rows),
    )


def passes_of(rows: list[Example], cfg: EngineConfig) -> list[Pass]:
    """The passes that train ``rows`` (one update's conversations, or a validation set).

    ``data.use_dynamic_bsz`` false: one conversation per pass. Dynamic batches with a
    ``token_budget``: whole conversations packed best-fit decreasing into passes of at
    most that many tokens (:func:`akka_optimize.data.packing.pack`). Without a budget:
    ``micro_batch`` consecutive conversations per pass. An image row is always a pass of
    its own (its vision inputs belong to one sequence). The loss of an update is the same
    in every case (a token-weighted sum over the update; behaviours.md 1, 2).
    """
    if not cfg.dynamic_batches:
        return [pack_examples([ex]) for ex in rows]
    if cfg.token_budget is not None:  # a conversation longer than the budget: its own pass
        return pack(rows, max([cfg.token_budget, *(len(ex.input_ids) for ex in rows)]))
    out, group = [], []
    for ex in rows:  # ``micro_batch`` consecutive text rows; an image row alone
        if ex.vision:
            out.append(pack_examples([ex]))
            continue
        group.append(ex)
        if len(group) == cfg.micro_batch:
            out.append(pack_examples(group))
            group = []
    return out + ([pack_examples(group)] if group else [])


def total_updates(cfg: EngineConfig, rows: int) -> int:
    """Updates a run of ``rows`` training rows makes: updates per epoch × epochs, capped
    at ``max_steps`` when the plan sets it."""
    total = cfg.updates_per_epoch(rows) * cfg.epochs
    return min(total, cfg.max_steps) if cfg.max_steps is not None else total
