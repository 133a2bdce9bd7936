"""An endpoint stops where training taught the model to stop (issue 15 item 6).

The stop set is the tokenizer's EOS ids plus the end-of-turn token the chat template
writes after a reply, found by :func:`akka_optimize.data.render.template_markers`, the
same function that decides which end-of-turn marker a supervised turn trains. The
template here ends a turn with ``<file_sep>`` (a special token of the SmolLM2 vocabulary
that is not its EOS ``<|im_end|>`` and appears in no fixed list of markers), so a stop
set taken from a list of known markers misses it.
"""

from __future__ import annotations

import pytest

from akka_optimize.data.masks import encode_rows
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.rows import parse_row
from akka_optimize.serving.engine import stop_token_ids

TURN_END = "<file_sep>"
TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '" + TURN_END + "\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture
def turn_end_tokenizer(smollm2_tokenizer_dir):
    """The SmolLM2 tokenizer (EOS ``<|im_end|>``) with a template ending turns in TURN_END."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = TEMPLATE
    return tok


def test_the_stop_set_holds_the_end_of_turn_token_that_training_supervises(
    turn_end_tokenizer,
) -> None:
    tok = turn_end_tokenizer
    turn_end = tok.convert_tokens_to_ids(TURN_END)
    assert tok.eos_token != TURN_END
    row = parse_row(
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
        1,
    )
    ex = encode_rows(tok, [row], LossPolicy(), [1])[0].example
    supervised = [t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w]
    assert supervised[-1] == turn_end  # the turn's marker trains, so the model learns to stop

    stops = stop_token_ids(tok)
    assert turn_end in stops
    assert stops == {tok.eos_token_id, turn_end}


def test_markers_the_template_mentions_but_does_not_end_a_turn_with_are_not_stops(
    smollm2_tokenizer_dir,
) -> None:
    """``<|endoftext|>`` written at the start of every conversation is no end of turn."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = "{{- '<|endoftext|>' }}" + TEMPLATE.replace(TURN_END, "<|im_end|>")
    assert stop_token_ids(tok) == {tok.eos_token_id}  # <|im_end|>, the EOS and end of turn


def test_the_generation_config_s_eos_ids_stop_too(turn_end_tokenizer) -> None:
    stops = stop_token_ids(turn_end_tokenizer, {"eos_token_id": [0, 2]})
    assert stops == {0, 2, turn_end_tokenizer.convert_tokens_to_ids(TURN_END)}
