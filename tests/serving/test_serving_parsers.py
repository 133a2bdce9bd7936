"""Tool-call and reasoning parsers: each markup read whole and streamed in any cut."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akka_optimize.serving.parsers import (
    GEMMA4,
    HERMES,
    StreamSplitter,
    gemma4_arguments,
    gemma4_call_text,
    markup_for,
    parse_generated,
    parsers_for,
)

GEMMA4_TEXT = (
    "<|channel>thought\nThe user wants Paris's weather.<channel|>"
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,hourly:false,'
    'where:{lat:48.85,tags:[<|"|>a, b<|"|>]}}<tool_call|>'
)
GEMMA4_ARGS = {
    "city": "Paris",
    "days": 3,
    "hourly": False,
    "where": {"lat": 48.85, "tags": ["a, b"]},
}


def test_gemma4_architectures_have_gemma4_parsers_for_calls_and_reasoning():
    for arch in ("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"):
        assert vars(parsers_for(arch)) == {"tool_calls": "gemma4", "reasoning": "gemma4"}
        assert markup_for(arch) is GEMMA4
    assert markup_for("LlamaForCausalLM") is HERMES


def test_a_gemma4_call_and_its_reasoning_come_apart():
    p = parse_generated(GEMMA4_TEXT, tools=True, reasoning=True, markup=GEMMA4)
    assert p.reasoning == "The user wants Paris's weather."
    assert p.content == ""
    (call,) = p.tool_calls
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == GEMMA4_ARGS


def test_gemma4_strings_keep_colons_commas_and_braces():
    text = '{q:<|"|>a:b, {c}<|"|>,n:-1.5e2,x:null}'
    assert gemma4_arguments(text) == {"q": "a:b, {c}", "n": -150.0, "x": None}


def test_a_gemma4_block_that_is_not_a_call_stays_in_the_answer():
    bad = '<|tool_call>call:get_weather{city:<|"|>Paris}<tool_call|>'  # unclosed string
    p = parse_generated("ok " + bad, tools=True, reasoning=True, markup=GEMMA4)
    assert p.tool_calls == [] and p.content == "ok " + bad


def test_gemma4_call_text_reads_back_as_the_same_call():
    text = gemma4_call_text("get_weather", json.dumps(GEMMA4_ARGS))
    (call,) = parse_generated(text, tools=True, reasoning=False, markup=GEMMA4).tool_calls
    assert json.loads(call["function"]["arguments"]) == GEMMA4_ARGS


def test_hermes_markup_is_unchanged_by_gemma4():
    text = '<think>hm</think>Sure.<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    p = parse_generated(text, tools=True, reasoning=True, markup=HERMES)
    assert (p.reasoning, p.content) == ("hm", "Sure.")
    assert json.loads(p.tool_calls[0]["function"]["arguments"]) == {"a": 1}
    # Hermes tags mean nothing to Gemma 4's parser, and the reverse
    assert parse_generated(text, tools=True, reasoning=True, markup=GEMMA4).tool_calls == []


def _streamed(text: str, cuts: list[int], markup) -> tuple[str, str | None, list[str]]:
    sp = StreamSplitter(tools=True, reasoning=True, markup=markup)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    events = [
        e for a, b in zip(bounds, bounds[1:], strict=False) for e in sp.feed(text[a:b])
    ] + sp.finish()
    content = "".join(v for k, v in events if k == "content")
    reasoning = next((v for k, v in events if k == "reasoning"), None)
    calls = [v["function"]["arguments"] for k, v in events if k == "tool_call"]
    return content, reasoning, calls


@settings(
    max_examples=60, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(st.integers(min_value=0, max_value=len(GEMMA4_TEXT) + 10), max_size=12))
def test_a_streamed_gemma4_answer_gives_what_the_whole_answer_gives(cuts):
    text = "Let me check. " + GEMMA4_TEXT + " done"
    whole = parse_generated(text, tools=True, reasoning=True, markup=GEMMA4)
    content, reasoning, calls = _streamed(text, cuts, GEMMA4)
    assert reasoning == whole.reasoning
    assert calls == [c["function"]["arguments"] for c in whole.tool_calls]
    assert content == "Let me check.  done"
