"""Whole conversations into passes: best-fit-decreasing packing, or one conversation per pass.

seeds/001 "Packed passes keep conversations apart" and "Set the training engine's
settings directly": by default (``data.use_dynamic_bsz`` true) each pass is packed with
whole conversations up to a token budget; ``data.use_dynamic_bsz: false`` trains one
conversation per pass, and the loss is unchanged. Here that setting is the ``dynamic``
argument of :func:`pack`.

A packed :class:`~akka_optimize.data.types.Pass` carries what the engine needs to keep the
conversations apart: ``position_ids`` restarting at 0 for each conversation and
``cu_seqlens`` boundaries. transformers isolates packed sequences from ``position_ids``
resets only when ``attention_mask`` is ``None`` (DATA-AND-TRAINING-RULES.md §2.9), which
is the engine's side. The first token of every conversation has weight 0, so after the
causal shift no label crosses a boundary.

Worked example (``token_budget=8``; lengths 5, 3, 4, 2 for rows 1–4)::

    sorted by length: 5 (row 1), 4 (row 3), 3 (row 2), 2 (row 4)
    row 1 → new pass A (3 left); row 3 → new pass B (4 left);
    row 2 → A (fits exactly, 0 left); row 4 → B (2 left)
    passes: A = rows [1, 2], cu_seqlens [0, 5, 8]; B = rows [3, 4], cu_seqlens [0, 4, 6]

Nothing is cut or dropped: a conversation longer than the budget is refused (rows too long
for ``maxSeqLength`` were already dropped or refused by ``prepare_examples``).
"""

from __future__ import annotations

import bisect
from typing import Any

from akka_optimize.data.types import Example, Pass, pack_examples
from akka_optimize.errors import InvalidRequest


def pack(examples: list[Example], token_budget: int, dynamic: bool = True) -> list[Pass]:
    """Pack whole conversations into passes of at most ``token_budget`` tokens.

    Args:
        examples: tokenized conversations (each already within ``maxSeqLength``).
        token_budget: most tokens in one pass (≥ the longest example).
        dynamic: ``True`` (``data.use_dynamic_bsz`` true, the default) packs best-fit
            decreasing: longest first, each into the fullest pass it still fits; ``False``
            gives one conversation per pass, in the given order.

    Returns:
        Passes; every example appears in exactly one, whole. An image row
        (``Example.vision``) is a pass of its own, after the packed ones. With ``dynamic`` the passes
        are in the order they were opened, and conversations within a pass in the order
        they were placed (longest first); ties keep the input order.

    Raises:
        InvalidRequest: an example is longer than ``token_budget`` (names its row).
        ValueError: ``token_budget`` < 1.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, not {token_budget}")
    too_long = [ex for ex in examples if len(ex.input_ids) > token_budget]
    if too_long:
        ex = max(too_long, key=lambda e: len(e.input_ids))
        raise InvalidRequest(
            f"row {ex.row} has {len(ex.input_ids)} tokens, more than the pass budget of "
            f"{token_budget} tokens ({len(too_long)} rows do not fit); raise the budget or "
            "lower maxSeqLength",
            details={"rows": [e.row for e in too_long]},
        )
    if not dynamic:
        return [pack_examples([ex]) for ex in examples]
    alone = [pack_examples([ex]) for ex in examples if ex.vision]  # image rows: one each
    examples = [ex for ex in examples if not ex.vision]
    order = sorted(range(len(examples)), key=lambda i: (-len(examples[i].input_ids), i))
    bins: list[list[Example]] = []
    free: list[tuple[int, int]] = []  # (tokens left, bin index), sorted
    for i in order:
        ex = examples[i]
        n = len(ex.input_ids)
        k = bisect.bisect_left(free, (n, -1))
        if k < len(free):
            left, b = free.pop(k)
        else:
            bins.append([])
            left, b = token_budget, len(bins) - 1
        bins[b].append(ex)
        if left - n > 0:
            bisect.insort(free, (left - n, b))
    return [pack_examples(b) for b in bins] + alone


def padded_batch(examples: list[Example], pad_id: int, length: int | None = None) -> dict[str, Any]:
    """Right-pad conversations to one length for an unpacked forward pass.

    Padding is excluded by length (``attention_mask`` and weight 0 past each conversation's
    end), never by token id: with pad == EOS (SmolLM2), the real end-of-turn token keeps its
    weight (behaviours.md 3).

    Args:
        examples: the batch.
        pad_id: the tokenizer's pad token id.
        length: pad to this many tokens (default: the longest example).

    Returns:
        ``{"input_ids": B×T ints, "weights": B×T floats, "attention_mask": B×T 0/1,
        "lengths": B ints}`` as nested lists.

    Raises:
        ValueError: an example is longer than ``length``, or ``examples`` is empty.
    """
    if not examples:
        raise ValueError("cannot pad an empty batch")
    longest = max(len(e.input_ids) for e in examples)
    t = longest if length is None else length
    if longest > t:
        raise ValueError(f"an example has {longest} tokens, more than the padded length {t}")
    batch: dict[str, Any] = {"input_ids": [], "weights": [], "attention_mask": [], "lengths": []}
    for ex in examples:
        n = len(ex.input_ids)
        w = list(ex.weights)
        w[0] = 0.0
        batch["input_ids"].append(list(ex.input_ids) + [pad_id] * (t - n))
        batch["weights"].append(w + [0.0] * (t - n))
        batch["attention_mask"].append([1] * n + [0] * (t - n))
        batch["lengths"].append(n)
    return batch
