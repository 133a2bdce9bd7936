"""Rendering and loss masks: conversations.jsonl with two chat templates, refusals, behaviours 3–5, 8.

Two tokenizers: the real SmolLM2 one (ChatML; renders only ``content``) and
``tools_tokenizer`` (the same vocabulary with the Qwen2.5/Hermes-style TOOLS_TEMPLATE of
tests/data/conftest.py, which renders tools, tool calls, tool results and reasoning).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akka_optimize.data.masks import prepare_examples, tokenize_row, weights_from_offsets
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import RenderError, render_row
from akka_optimize.data.rows import parse_row
from akka_optimize.errors import InvalidRequest

CASES = Path(__file__).resolve().parents[1] / "cases"
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]
USES_TOOLS = {c["name"] for c in GOOD if "tools" in c["row"]}


def supervised_text(tok, ex) -> str:
    return tok.decode([t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w])


def template_messages(row: dict) -> list[dict]:
    """The normalised row as plain messages (parts joined), as a user would pass them."""
    out = []
    for m in row["messages"]:
        m = dict(m)
        if isinstance(m["content"], list):
            m["content"] = "".join(p["text"] for p in m["content"])
        out.append(m)
    return out


def check_case(tok, case):
    row = parse_row(case["row"], 4)
    ex = tokenize_row(tok, row, LossPolicy.from_config(case["loss"]), 4)
    sup = supervised_text(tok, ex)
    for s in case["supervised"]:
        assert s in sup, (s, sup)
    for s in case["not_supervised"]:
        assert s not in sup, (s, sup)
    assert sup.endswith("<|im_end|>"), "the last trained turn's end-of-turn marker trains"
    want = tok.apply_chat_template(template_messages(row), tools=row.get("tools"), tokenize=True)
    assert ex.input_ids == want["input_ids"]
    assert ex.weights[0] == 0.0 and ex.row == 4


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_case_with_the_tools_template(tools_tokenizer, case):
    check_case(tools_tokenizer, case)


@pytest.mark.parametrize(
    "case", [c for c in GOOD if c["name"] not in USES_TOOLS], ids=lambda c: c["name"]
)
def test_case_with_the_smollm2_template(smollm2_tokenizer, case):
    check_case(smollm2_tokenizer, case)


@pytest.mark.parametrize(
    "case", [c for c in GOOD if c["name"] in USES_TOOLS], ids=lambda c: c["name"]
)
def test_smollm2_refuses_tool_rows_naming_what_its_template_drops(smollm2_tokenizer, case):
    row = parse_row(case["row"], 9)
    with pytest.raises(RenderError) as info:
        tokenize_row(smollm2_tokenizer, row, LossPolicy.from_config(case["loss"]), 9)
    msg = info.value.message
    assert msg.startswith("row 9: ")
    assert "tool calls (messages[1].tool_calls, lookup_order)" in msg
    assert "declared tools" in msg
    assert info.value.field == "row 9"


def test_reasoning_trains_apart_from_content(tools_tokenizer):
    """§1.1 B: a reasoning part flagged false is masked; the correction and the answer train."""
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {
                    "role": "assistant",
                    "reasoning_content": [
                        {"type": "text", "text": "maybe 2+2=5", "train": False},
                        {"type": "text", "text": "\nNo: 2+2=4.", "train": True},
                    ],
                    "content": "4",
                },
            ]
        },
        1,
    )
    ex = tokenize_row(tools_tokenizer, row, LossPolicy(), 1)
    sup = supervised_text(tools_tokenizer, ex)
    assert "maybe" not in sup and "=5" not in sup
    assert "No: 2+2=4." in sup and sup.endswith("4<|im_end|>")


def test_smollm2_refuses_reasoning_of_a_trained_turn(smollm2_tokenizer):
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "reasoning_content": "r", "content": "a"},
            ]
        },
        3,
    )
    with pytest.raises(
        RenderError, match=r"row 3: .*reasoning \(messages\[1\]\.reasoning_content\)"
    ):
        tokenize_row(smollm2_tokenizer, row, LossPolicy(), 3)


def test_straddling_token_is_masked_and_a_warning_names_the_part(smollm2_tokenizer, caplog):
    case = next(c for c in GOOD if c["name"] == "content-parts-straddling-token-masked")
    row = parse_row(case["row"], 2)
    with caplog.at_level(logging.WARNING):
        ex = tokenize_row(smollm2_tokenizer, row, LossPolicy(), 2)
    sup = supervised_text(smollm2_tokenizer, ex)
    assert sup == " answer is 4.<|im_end|>"  # " The" crosses the boundary: masked
    assert "messages[1].content[0] ends with whitespace" in caplog.text
    clean = parse_row(next(c for c in GOOD if c["name"] == "content-parts-train-flags")["row"], 2)
    assert supervised_text(
        smollm2_tokenizer, tokenize_row(smollm2_tokenizer, clean, LossPolicy(), 2)
    ) == (" The answer is 4.<|im_end|>")


def test_token_offsets_that_trim_a_leading_space_still_count_as_straddling():
    # token 1 reports (5, 8) but the space at 4 belongs to it: the interval starts at 5
    assert weights_from_offsets([(0, 4), (5, 8)], [(5, 8)]) == [0.0, 0.0]
    assert weights_from_offsets([(0, 4), (4, 8)], [(4, 8)]) == [0.0, 1.0]


def test_template_that_changes_text_is_refused_with_the_row_number(smollm2_tokenizer_dir):
    """behaviours.md 4: spans that cannot be recovered are reported, never guessed."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content | upper) + '<|im_end|>\\n' }}{% endfor %}"
    row = parse_row(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, 6
    )
    with pytest.raises(RenderError, match="row 6: .*cannot be recovered"):
        tokenize_row(tok, row, LossPolicy(), 6)


def test_template_that_trims_content_is_handled(smollm2_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content | trim) + '<|im_end|>\\n' }}{% endfor %}"
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "  Hello there \n"},
            ]
        },
        1,
    )
    ex = tokenize_row(tok, row, LossPolicy(), 1)
    assert supervised_text(tok, ex) == "Hello there<|im_end|>"


def test_end_of_turn_trains_with_pad_equal_to_eos(smollm2_tokenizer):
    """behaviours.md 3 (data side): "Hi" → "Hello" supervises the real <|im_end|> even though pad == EOS."""
    tok = smollm2_tokenizer
    assert tok.pad_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
        1,
    )
    ex = tokenize_row(tok, row, LossPolicy(), 1)
    trained = [t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w]
    assert trained[-1] == tok.eos_token_id
    assert tok.decode(trained) == "Hello<|im_end|>"
    # the user turn's <|im_end|> (same id) is not trained: masks come from spans, not ids
    eos_positions = [i for i, t in enumerate(ex.input_ids) if t == tok.eos_token_id]
    assert [ex.weights[i] for i in eos_positions] == [0.0, 0.0, 1.0]


def test_tool_call_arguments_are_encoded_once(tools_tokenizer):
    """behaviours.md 8: string and object arguments render the same text, the object once."""
    case = next(c for c in GOOD if c["name"] == "tool-call-trained")
    as_string = parse_row(case["row"], 1)
    obj = json.loads(json.dumps(case["row"]))
    obj["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"order_id": "A-1042"}
    as_object = parse_row(obj, 1)
    a = render_row(tools_tokenizer, as_string, LossPolicy(), 1).text
    b = render_row(tools_tokenizer, as_object, LossPolicy(), 1).text
    assert a == b
    assert a.count('"arguments": {"order_id": "A-1042"}') == 1
    assert '\\"order_id\\"' not in a
    assert '"name": "lookup_order", "description"' in a  # the declared tools reach the template


def test_last_turn_policy_trains_fewer_tokens_and_tool_results_add_tokens(tools_tokenizer):
    """F026 acceptance: last < all; trainOnToolResults adds the tool message's tokens."""
    row = parse_row(next(c for c in GOOD if c["name"] == "tool-call-trained")["row"], 1)
    n = {
        p: tokenize_row(tools_tokenizer, row, p, 1).supervised_tokens
        for p in (LossPolicy("all"), LossPolicy("last"), LossPolicy("all", True, True))
    }
    assert n[LossPolicy("last")] < n[LossPolicy("all")] < n[LossPolicy("all", True, True)]


def test_no_supervised_rows_are_listed_and_an_empty_dataset_is_refused(tools_tokenizer):
    """behaviours.md 4: a row that ends with a tool call, under trainOnToolCalls false, trains nothing."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calls_only = parse_row(
        {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
            ],
        },
        2,
    )
    ok = parse_row(
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, 1
    )
    policy = LossPolicy("all", train_on_tool_calls=False)
    prep = prepare_examples(tools_tokenizer, [ok, calls_only, ok], policy, 512)
    assert prep.report["no_supervised"] == [2]
    assert prep.report["rows"] == 3 and prep.report["examples"] == 2
    assert [e.row for e in prep.examples] == [1, 3]
    with pytest.raises(
        InvalidRequest, match="no supervised token remains .*1 with no supervised token"
    ) as info:
        prepare_examples(tools_tokenizer, [calls_only], policy, 512)
    assert info.value.field == "config.dataset"
    # the same row trains its call when the policy says so
    assert tokenize_row(tools_tokenizer, calls_only, LossPolicy(), 2).supervised_tokens > 0


def test_truncation_is_visible(smollm2_tokenizer):
    """behaviours.md 5: a 40-token prompt with a 6-token answer at maxSeqLength 32 is dropped or refused."""
    tok = smollm2_tokenizer
    prompt = " ".join(["word"] * 40)
    long_row = parse_row(
        {
            "messages": [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": "one two three four five six"},
            ]
        },
        2,
    )
    short = parse_row(
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
            ]
        },
        1,
    )
    prep = prepare_examples(tok, [short, long_row], LossPolicy(), 32)
    assert prep.report["dropped_too_long"] == [2]
    assert [e.row for e in prep.examples] == [1]
    assert all(len(e.input_ids) <= 32 for e in prep.examples)
    with pytest.raises(InvalidRequest, match=r"row 2 \(\d+ tokens\)"):
        prepare_examples(tok, [short, long_row], LossPolicy(), 32, on_too_long="refuse")
    with pytest.raises(
        InvalidRequest, match="no supervised token remains .*longer than maxSeqLength 32"
    ):
        prepare_examples(tok, [long_row], LossPolicy(), 32)


def test_report_counts_tokens(smollm2_tokenizer):
    rows = [parse_row(c["row"], i + 1) for i, c in enumerate(GOOD) if c["name"] not in USES_TOOLS]
    prep = prepare_examples(smollm2_tokenizer, rows, LossPolicy(), 4096)
    sup = [e.supervised_tokens for e in prep.examples]
    assert prep.report["supervised_tokens"]["min"] == min(sup)
    assert prep.report["supervised_tokens"]["max"] == max(sup)
    assert prep.report["supervised_tokens"]["total"] == sum(sup)
    assert prep.report["total_tokens"]["total"] == sum(len(e.input_ids) for e in prep.examples)
    assert len(prep.report["warnings"]) == 1


TEXT = st.text(alphabet="abcdefgh XYZ.,!?0123456789\n'", min_size=1, max_size=40).filter(
    lambda s: not s[0].isspace()
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    turns=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=4),
    system=st.one_of(st.none(), TEXT),
    last=st.booleans(),
)
def test_each_trained_turn_decodes_to_its_content_and_end_marker(
    smollm2_tokenizer, turns, system, last
):
    """Property: the runs of supervised tokens decode to each trained assistant content + <|im_end|>."""
    tok = smollm2_tokenizer
    messages = [{"role": "system", "content": system}] if system else []
    for user, assistant in turns:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    row = parse_row({"messages": messages}, 1)
    ex = tokenize_row(tok, row, LossPolicy("last" if last else "all"), 1)
    runs, cur = [], []
    for t, w in zip(ex.input_ids, ex.weights, strict=True):
        if w:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    trained = [a for _, a in turns][-1:] if last else [a for _, a in turns]
    assert [tok.decode(r) for r in runs] == [a + "<|im_end|>" for a in trained]


def test_rows_with_images_are_refused_by_a_text_template(smollm2_tokenizer):
    row = parse_row(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "sha256:ab"},
                        {"type": "text", "text": "What?"},
                    ],
                },
                {"role": "assistant", "content": "A cat."},
            ]
        },
        5,
    )
    with pytest.raises(RenderError, match=r"row 5: the row has images \(messages\[0\]\.content\)"):
        tokenize_row(smollm2_tokenizer, row, LossPolicy(), 5)


def test_a_template_that_writes_bos_gets_exactly_one(smollm2_tokenizer_dir):
    """Token ids equal apply_chat_template(tokenize=True): the template's BOS once, none added."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.role + ':\\n' + m.content + eos_token + '\\n' }}{% endfor %}"
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
        1,
    )
    ex = tokenize_row(tok, row, LossPolicy(), 1)
    assert ex.input_ids == tok.apply_chat_template(row["messages"], tokenize=True)["input_ids"]
    assert ex.input_ids.count(tok.bos_token_id) == 1 and ex.input_ids[0] == tok.bos_token_id
    assert supervised_text(tok, ex) == "Hello<|im_end|>"
    assert supervised_text(tok, ex) == "Hello<|im_end|>"


def test_a_token_joining_a_header_space_and_the_reply_is_masked(smollm2_tokenizer_dir):
    """The straddling rule applies at the turn's start too: "assistant: Hello" makes " Hello" one token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = (
        "{% for m in messages %}{{ m.role + ': ' + m.content + eos_token + '\\n' }}{% endfor %}"
    )
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello there"},
            ]
        },
        1,
    )
    assert supervised_text(tok, tokenize_row(tok, row, LossPolicy(), 1)) == " there<|im_end|>"


def test_a_prompt_row_supervises_nothing_and_is_listed(tools_tokenizer):
    """Issue 18 item 1: a prompt row (ending with a user message, its answer in
    ground_truth) parses, and a supervised run lists it with the rows that train nothing."""
    ok = parse_row(
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, 1
    )
    prompt = parse_row({"prompt": "2+2?", "ground_truth": "4"}, 2)
    assert prompt["messages"] == [{"role": "user", "content": "2+2?"}]
    prep = prepare_examples(tools_tokenizer, [ok, prompt], LossPolicy("all"), 512)
    assert prep.report["no_supervised"] == [2] and [e.row for e in prep.examples] == [1]
