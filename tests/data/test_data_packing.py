"""Packing: whole conversations, best-fit decreasing, boundaries explicit (behaviours.md 2, 3 data side)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akka_optimize.data.masks import tokenize_row
from akka_optimize.data.packing import pack, padded_batch
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.rows import parse_row
from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest


def ex(n: int, row: int, start: int = 1) -> Example:
    return Example(list(range(start, start + n)), [0.0] + [1.0] * (n - 1), row)


def test_two_sequences_pack_with_restarting_positions_and_boundaries():
    """behaviours.md 2, data side: [1,2,3] + [4,5,6,7,8]."""
    a = Example([1, 2, 3], [0.0, 1.0, 1.0], 1)
    b = Example([4, 5, 6, 7, 8], [1.0, 1.0, 1.0, 1.0, 1.0], 2)  # a first weight of 1 is dropped
    (p,) = pack([a, b], token_budget=8)
    assert p.input_ids == [4, 5, 6, 7, 8, 1, 2, 3]  # longest first
    assert p.position_ids == [0, 1, 2, 3, 4, 0, 1, 2]
    assert p.cu_seqlens == [0, 5, 8]
    assert p.rows == [2, 1]
    # no label crosses a boundary: the first token of each sequence is never a target
    assert [p.weights[i] for i in p.cu_seqlens[:-1]] == [0.0, 0.0]
    assert p.weights == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def test_worked_example_of_the_docstring():
    passes = pack([ex(5, 1), ex(3, 2), ex(4, 3), ex(2, 4)], token_budget=8)
    assert [p.rows for p in passes] == [[1, 2], [3, 4]]
    assert [p.cu_seqlens for p in passes] == [[0, 5, 8], [0, 4, 6]]


def test_one_conversation_per_pass_when_not_dynamic():
    """data.use_dynamic_bsz false: one conversation per pass, input order kept."""
    passes = pack([ex(5, 1), ex(3, 2), ex(4, 3)], token_budget=100, dynamic=False)
    assert [p.rows for p in passes] == [[1], [2], [3]]
    assert [p.cu_seqlens for p in passes] == [[0, 5], [0, 3], [0, 4]]


def test_a_conversation_longer_than_the_budget_is_refused_not_cut():
    with pytest.raises(InvalidRequest, match="row 2 has 9 tokens, more than the pass budget of 8"):
        pack([ex(3, 1), ex(9, 2)], token_budget=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(50, 120))
def test_packing_keeps_every_conversation_whole_and_within_budget(lengths, budget):
    examples = [ex(n, i + 1, start=1000 * i) for i, n in enumerate(lengths)]
    passes = pack(examples, budget)
    assert sorted(r for p in passes for r in p.rows) == list(range(1, len(lengths) + 1))
    by_row = {e.row: e for e in examples}
    for p in passes:
        assert p.num_tokens <= budget
        assert p.cu_seqlens[-1] == p.num_tokens
        for k, row in enumerate(p.rows):
            a, b = p.cu_seqlens[k], p.cu_seqlens[k + 1]
            assert p.input_ids[a:b] == by_row[row].input_ids
            assert p.position_ids[a:b] == list(range(b - a))
    # best fit decreasing: no two passes could be merged into one
    sizes = sorted(p.num_tokens for p in passes)
    assert len(sizes) < 2 or sizes[0] + sizes[1] > budget
    assert sum(p.supervised_tokens for p in passes) == sum(e.supervised_tokens for e in examples)


def test_padding_is_excluded_by_length_not_by_id(smollm2_tokenizer):
    """behaviours.md 3, data side: pad == EOS, the real <|im_end|> keeps its weight."""
    tok = smollm2_tokenizer
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
        1,
    )
    e = tokenize_row(tok, row, LossPolicy(), 1)
    batch = padded_batch([e], pad_id=tok.pad_token_id, length=len(e.input_ids) + 7)
    ids, w, mask = batch["input_ids"][0], batch["weights"][0], batch["attention_mask"][0]
    n = batch["lengths"][0]
    assert n == len(e.input_ids)
    assert ids[n - 2] == tok.eos_token_id and w[n - 2] == 1.0  # "<|im_end|>" then "\n"
    assert ids[n:] == [tok.eos_token_id] * 7 and w[n:] == [0.0] * 7 and mask[n:] == [0] * 7
    assert tok.decode([t for t, x in zip(ids, w, strict=True) if x]) == "Hello<|im_end|>"
