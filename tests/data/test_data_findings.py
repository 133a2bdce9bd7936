"""Findings (counts, tokens, truncation, empty masks, duplicates) and the preview's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from akka_optimize.data.findings import duplicates, findings
from akka_optimize.data.masks import tokenize_row
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.preview import preview
from akka_optimize.data.render import RenderError
from akka_optimize.data.rows import parse_row

CASES = Path(__file__).resolve().parents[1] / "cases"
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]


def conv(user: str, assistant: str) -> dict:
    return parse_row(
        {
            "messages": [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]
        },
        1,
    )


def test_findings_list_duplicates_truncation_and_counts(smollm2_tokenizer):
    long_prompt = " ".join(["word"] * 40)
    rows = [
        conv("Payment failed twice, card declined.", "Category: billing."),  # 1
        conv("App crashes on login after the update to version 2.", "Category: bug."),  # 2
        conv("Payment failed twice, card declined.", "Category: billing."),  # 3 = 1
        conv("app crashes on login after the update to version 2!", "Category: bug."),  # 4 ~ 2
        conv(long_prompt, "one two three four five six"),  # 5 too long
        conv("Refund please, the item arrived broken and useless.", "Category: refund."),  # 6
    ]
    f = findings(smollm2_tokenizer, rows, LossPolicy(), 48)
    assert f["rows"] == 6
    assert f["truncated_rows"] == [5] and f["truncated_rows_count"] == 1
    assert f["exact_duplicates"] == [[1, 3]]
    assert f["near_duplicates"] == [[2, 4]]
    assert f["trainable_rows"] == 5
    assert f["no_supervised_rows"] == [] and f["refused_rows"] == []
    assert f["supervised_tokens"]["min"] >= 4  # "Category: bug." + <|im_end|>
    assert f["total_tokens"]["max"] <= 48


def test_findings_name_rows_the_template_cannot_render(smollm2_tokenizer):
    tool_row = parse_row(next(c for c in GOOD if c["name"] == "tool-call-trained")["row"], 1)
    f = findings(
        smollm2_tokenizer, [conv("a b c", "d"), tool_row], LossPolicy(), 512, row_numbers=[3, 4]
    )
    assert [r["row"] for r in f["refused_rows"]] == [4]
    assert "tool calls" in f["refused_rows"][0]["message"]
    assert f["trainable_rows"] == 1


def test_distinct_rows_are_not_duplicates():
    rows = [conv(f"question number {i} about topic {i * 7}", f"answer {i}") for i in range(30)]
    assert duplicates(rows, list(range(1, 31))) == {"exact_duplicates": [], "near_duplicates": []}


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_preview_json_marks_the_supervised_spans(tools_tokenizer, case):
    row = parse_row(case["row"], 1)
    (p,) = preview(tools_tokenizer, [row], LossPolicy.from_config(case["loss"]), 5)
    text = "".join(s["text"] for s in p["segments"])
    assert text == tools_tokenizer.apply_chat_template(
        [
            m
            | {
                "content": m["content"]
                if isinstance(m["content"], str)
                else "".join(x["text"] for x in m["content"])
            }
            for m in row["messages"]
        ],
        tools=row.get("tools"),
        tokenize=False,
    )
    supervised = "".join(s["text"] for s in p["segments"] if s["supervised"])
    for s in case["supervised"]:
        assert s in supervised
    for s in case["not_supervised"]:
        assert s not in supervised
    assert p["tokens"] > p["supervised_tokens"] > 0


def test_preview_reports_a_refused_row_and_keeps_going(smollm2_tokenizer):
    tool_row = parse_row(next(c for c in GOOD if c["name"] == "tool-call-trained")["row"], 1)
    out = preview(
        smollm2_tokenizer, [conv("Hi", "Hello"), tool_row, conv("x", "y")], LossPolicy(), 2
    )
    assert [p["row"] for p in out] == [1, 2]
    assert [s for s in out[0]["segments"] if s["supervised"]] == [
        {"text": "Hello<|im_end|>", "supervised": True}
    ]
    assert out[1]["error"].startswith("row 2: the base model's chat template drops tool calls")


# A Qwen3-style template that writes an empty reasoning block into every assistant turn
# that has no reasoning of its own: text the row does not contain.
SCAFFOLD_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content %}"
    "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{{- message.content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture
def scaffold_tokenizer(smollm2_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tok.chat_template = SCAFFOLD_TEMPLATE
    return tok


def _supervised_text(tokenizer, row) -> str:
    from akka_optimize.data.masks import encode_rows

    ex = encode_rows(tokenizer, [row], LossPolicy(), [1])[0].example
    return tokenizer.decode([t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w])


def test_scaffolding_the_template_inserts_is_not_supervised_and_is_reported(scaffold_tokenizer):
    """issue 15 item 5: the empty reasoning block is the template's, not the row's."""
    rows = [conv("2+2?", "4"), conv("3+3?", "6")]
    assert _supervised_text(scaffold_tokenizer, rows[0]) == "4<|im_end|>"
    f = findings(scaffold_tokenizer, rows, LossPolicy(), 512, row_numbers=[7, 8])
    inserted = [w for w in f["warnings"] if "inserts" in w]
    assert len(inserted) == 2
    assert inserted[0].startswith("row 7: ") and "messages[1]" in inserted[0]
    assert "'<think>\\n\\n</think>\\n\\n'" in inserted[0] and "not trained" in inserted[0]


def test_the_wrapper_of_reasoning_the_row_has_is_supervised(scaffold_tokenizer):
    """Tags the template writes around the row's own reasoning train with it."""
    row = parse_row(
        {
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "reasoning_content": "two and two", "content": "4"},
            ]
        },
        1,
    )
    assert (
        _supervised_text(scaffold_tokenizer, row) == "<think>\ntwo and two\n</think>\n\n4<|im_end|>"
    )
    assert not [w for w in findings(scaffold_tokenizer, [row], LossPolicy(), 512)["warnings"]]


# A template that rewrites history: an assistant turn followed by others is written with a
# remark after its content that the same turn, written last (where it is generated), lacks.
REWRITING_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message.content }}"
    "{%- if not loop.last %}{{- ' (earlier)' }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A template whose generation prompt differs from how it opens an assistant turn.
OTHER_PROMPT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant reply\\n' }}{%- endif %}"
)


def _tokenizer(dir, template):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(dir)
    tok.chat_template = template
    return tok


def test_a_turn_rendered_otherwise_where_it_is_generated_is_refused(smollm2_tokenizer_dir):
    """issue 15 item 5: trained turn 1 is written with a remark once turn 3 follows; the
    text it would train on is not the text generated from its prompt, so the row is
    refused naming the turn (or trains its last turn only)."""
    tok = _tokenizer(smollm2_tokenizer_dir, REWRITING_TEMPLATE)
    two_turns = parse_row(
        {
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": "and 3+3?"},
                {"role": "assistant", "content": "6"},
            ]
        },
        1,
    )
    f = findings(tok, [conv("a", "b"), two_turns], LossPolicy(), 512, row_numbers=[4, 5])
    assert [r["row"] for r in f["refused_rows"]] == [5] and f["trainable_rows"] == 1
    message = f["refused_rows"][0]["message"]
    assert message.startswith("row 5: messages[1]") and "where it is generated" in message
    with pytest.raises(RenderError, match="where it is generated"):
        tokenize_row(tok, two_turns, LossPolicy(), 5)  # training refuses it too
    # only the last turn trains: its prompt is the history as written, so nothing to report
    last = findings(tok, [two_turns], LossPolicy(assistant_turns="last"), 512)
    assert last["refused_rows"] == [] and last["trainable_rows"] == 1
    assert "error" in preview(tok, [two_turns], LossPolicy(), 1)[0]


def test_a_prompt_that_is_not_a_prefix_of_the_row_is_refused(smollm2_tokenizer_dir):
    """issue 47 item 13: a template whose generation prompt differs from what history
    renders: the single turn would train after text an endpoint never generates it from,
    so training refuses the row (and the findings, which the dry run shows, say so)."""
    tok = _tokenizer(smollm2_tokenizer_dir, OTHER_PROMPT_TEMPLATE)
    row = conv("2+2?", "4")
    f = findings(tok, [row], LossPolicy(), 512, row_numbers=[9])
    assert [r["row"] for r in f["refused_rows"]] == [9] and f["trainable_rows"] == 0
    message = f["refused_rows"][0]["message"]
    assert message.startswith("row 9: messages[1]: its prompt as an endpoint renders it")
    assert "not a prefix of the row's tokens (they differ at token" in message
    with pytest.raises(RenderError, match="not a prefix"):
        tokenize_row(tok, row, LossPolicy(), 9)


def test_a_completion_whose_whitespace_merges_with_the_generation_prompt_is_refused(
    smollm2_tokenizer,
):
    """issue 47 item 13 on SmolLM2's own template: a single-turn completion starting with
    two spaces tokenizes with the prompt's closing newline as one token ("\n " then " 4"),
    so the row's ids do not start with the endpoint's prompt ids (they differ at the
    prompt's last token); one space, or none, keeps the prompt a prefix and trains."""
    merged, spaced = conv("2+2?", "  4"), conv("2+2?", " 4")
    prompt = smollm2_tokenizer.apply_chat_template(
        merged["messages"][:1], add_generation_prompt=True, tokenize=False
    )
    k = len(smollm2_tokenizer(prompt, add_special_tokens=False).input_ids) - 1
    f = findings(smollm2_tokenizer, [merged, spaced], LossPolicy(), 512, row_numbers=[1, 2])
    assert [r["row"] for r in f["refused_rows"]] == [1] and f["trainable_rows"] == 1
    assert f"they differ at token {k})" in f["refused_rows"][0]["message"]
    assert tokenize_row(smollm2_tokenizer, spaced, LossPolicy(), 2).supervised_tokens > 0


def test_consistent_templates_refuse_no_turn_for_its_prompt(smollm2_tokenizer, tools_tokenizer):
    """The good cases on SmolLM2's template and a template with tools: no row is refused
    for a turn's prompt (SmolLM2 still refuses the tool rows its template drops)."""
    rows = [parse_row(c["row"], i + 1) for i, c in enumerate(GOOD)]
    for tok in (smollm2_tokenizer, tools_tokenizer):
        f = findings(tok, rows, LossPolicy(), 4096)
        prompts = [r for r in f["refused_rows"] if "generated" in r["message"]]
        assert prompts == [], prompts


def test_the_printed_findings_name_refused_rows_and_warnings(scaffold_tokenizer):
    """What `training runs start --dry-run` prints from these findings."""
    import io

    from akka_optimize.cli.runs.start import print_findings

    tok = scaffold_tokenizer
    f = findings(tok, [conv("2+2?", "4")], LossPolicy(), 512, row_numbers=[3])
    f["refused_rows"] = [{"row": 3, "message": "row 3: messages[1]: ..."}]
    f["refused_rows_count"] = 1
    out = io.StringIO()
    print_findings({"dataset": "demo/train:v1", **f}, out)
    text = out.getvalue()
    assert "rows training refuses (template, or a turn's prompt): 1" in text
    assert "warnings: 1" in text and "row 3: the chat template inserts" in text


def test_findings_memory_grows_by_a_few_numbers_per_row_not_by_its_tokens(
    smollm2_tokenizer, monkeypatch
) -> None:
    """Issue 14 item 3: the findings keep counts per row, not tokens and offsets. Python's
    peak allocation (tracemalloc) during findings over 400 GSM8K rows exceeds the one over
    100 rows by under 8 KB per extra row; keeping every row's encoding costs about 40."""
    import tracemalloc

    from akka_optimize.data import findings as F
    from helpers import REPO

    monkeypatch.setattr(F, "FINDINGS_CHUNK_ROWS", 50)
    items = [json.loads(x) for x in (REPO / "data/gsm8k/train.jsonl").open()][:400]
    rows = [conv(it["question"], it["answer"]) for it in items]
    F.findings(smollm2_tokenizer, rows[:4], LossPolicy(), 2048)  # caches warmed first

    def peak(n: int) -> int:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            f = F.findings(smollm2_tokenizer, rows[:n], LossPolicy(), 2048)
            assert f["trainable_rows"] == n
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    small, large = peak(100), peak(400)
    assert (large - small) / 300 < 8_000, (small, large)


def test_findings_over_rows_read_in_place_equal_findings_over_the_parsed_list(
    smollm2_tokenizer,
) -> None:
    """The dry run reads a dataset through ``registry.row_view.JsonlRows`` (issue 14 item
    3): its findings are the list's, duplicates and refusals included."""
    from akka_optimize.registry.blobs import canonical_line
    from akka_optimize.registry.row_view import JsonlRows
    from helpers import REPO

    items = [json.loads(x) for x in (REPO / "data/gsm8k/train.jsonl").open()][:40]
    rows = [conv(it["question"], it["answer"]) for it in items]
    rows += [rows[3], {"messages": [{"role": "user", "content": "no answer"}]}]
    view = JsonlRows(b"".join(canonical_line(r) for r in rows))
    expected = findings(smollm2_tokenizer, rows, LossPolicy(), 2048)
    assert expected["exact_duplicates"] == [[4, 41]] and expected["rows"] == 42
    assert findings(smollm2_tokenizer, view, LossPolicy(), 2048) == expected
    assert preview(smollm2_tokenizer, view, LossPolicy(), 5) == preview(
        smollm2_tokenizer, rows, LossPolicy(), 5
    )


def _mixed_rows(n: int) -> list[dict]:
    """``n`` distinct rows; every third row's prompt is longer than 48 tokens; the last row
    repeats the first (an exact duplicate across the whole dataset)."""
    rows = []
    for i in range(1, n + 1):
        prompt = f"question {i} " + ("pad " * 60 if i % 3 == 0 else "short")
        rows.append(conv(prompt, f"answer {i}"))
    rows[-1] = rows[0]
    return rows


def test_findings_above_the_row_bound_sample_and_list_real_row_numbers(
    smollm2_tokenizer, monkeypatch
) -> None:
    """Issue 48 item 8: above ``FINDINGS_SAMPLE_ROWS`` the token findings and near
    duplicates cover a seeded sample and say so; the row numbers they list are the
    dataset's; exact duplicates still cover every row."""
    from akka_optimize.data import findings as F

    monkeypatch.setattr(F, "FINDINGS_SAMPLE_ROWS", 20)
    rows = _mixed_rows(90)
    numbers = list(range(101, 191))
    f = F.findings(smollm2_tokenizer, rows, LossPolicy(), 48, numbers)
    assert f["rows"] == 90
    assert f["sampled"]["rows"] == 20 and f["sampled"]["of"] == 90
    assert "20 of 90 rows" in f["sampled"]["why"] and "exact duplicates" in f["sampled"]["why"]
    assert f["exact_duplicates"] == [[101, 190]]
    # the sample's rows are counted once each: trained, too long, or neither
    assert f["trainable_rows"] + f["truncated_rows_count"] == 20
    assert 0 < f["truncated_rows_count"] < 20
    assert all((n - 100) % 3 == 0 for n in f["truncated_rows"]), f["truncated_rows"]
    # the same sample every time
    assert F.findings(smollm2_tokenizer, rows, LossPolicy(), 48, numbers) == f


def test_findings_at_or_below_the_bounds_cover_every_row(smollm2_tokenizer, monkeypatch) -> None:
    from akka_optimize.data import findings as F

    rows = _mixed_rows(30)
    monkeypatch.setattr(F, "FINDINGS_SAMPLE_ROWS", 30)
    f = F.findings(smollm2_tokenizer, rows, LossPolicy(), 48)
    assert "sampled" not in f
    assert f["trainable_rows"] + f["truncated_rows_count"] == 30
    assert f["truncated_rows"] == list(range(3, 30, 3))
    assert "sampled" not in F.duplicates(rows, list(range(1, 31)))


def test_findings_above_the_byte_bound_sample_within_it(smollm2_tokenizer, monkeypatch) -> None:
    """A few long rows: the sample is bounded in bytes as well as rows."""
    from akka_optimize.data import findings as F
    from akka_optimize.registry.blobs import canonical_line
    from akka_optimize.registry.row_view import JsonlRows

    rows = _mixed_rows(30)
    view = JsonlRows(b"".join(canonical_line(r) for r in rows))
    monkeypatch.setattr(F, "FINDINGS_SAMPLE_BYTES", 1000)
    f = F.findings(smollm2_tokenizer, view, LossPolicy(), 48)
    k = f["sampled"]["rows"]
    assert 0 < k < 30 and f["sampled"]["of"] == 30
    assert f["trainable_rows"] + f["truncated_rows_count"] == k
    assert f["exact_duplicates"] == [[1, 30]]
    assert f == F.findings(smollm2_tokenizer, rows, LossPolicy(), 48)


def test_duplicates_above_the_bound_say_near_duplicates_were_sampled(monkeypatch) -> None:
    from akka_optimize.data import findings as F

    monkeypatch.setattr(F, "FINDINGS_SAMPLE_ROWS", 10)
    rows = _mixed_rows(40)
    d = F.duplicates(rows, list(range(1, 41)))
    assert d["exact_duplicates"] == [[1, 40]]
    assert d["sampled"]["rows"] == 10 and d["sampled"]["of"] == 40
    assert "near duplicates" in d["sampled"]["why"]


def test_print_findings_says_the_findings_were_sampled() -> None:
    import io

    from akka_optimize.cli.runs.start import print_findings

    out = io.StringIO()
    why = "20 of 90 rows examined"
    print_findings({"dataset": "d", "rows": 90, "sampled": {"rows": 20, "of": 90, "why": why}}, out)
    assert f"  sampled: 20 of 90 rows ({why})" in out.getvalue()


def test_rows_whose_hashes_collide_are_grouped_by_their_bytes(monkeypatch) -> None:
    """Exact duplicates hash each row to 8 bytes: rows with equal hashes and different
    bytes are not duplicates (every hash made equal here)."""
    from akka_optimize.data import findings as F

    monkeypatch.setattr(F, "hash", lambda line: 7, raising=False)
    rows = _mixed_rows(30)
    rows[10] = rows[4]
    assert F.duplicates(rows, list(range(1, 31)))["exact_duplicates"] == [[1, 30], [5, 11]]
