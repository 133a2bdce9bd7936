"""A Gemma 4 endpoint on the transformers engine takes tools and parses Gemma 4's markup
(issue 54 item 5, F115; before, only vLLM declared Gemma 4's parsers and this engine
refused a Gemma 4 endpoint any tools).

The endpoint is the real worker app over a real :class:`TransformersEngine` loading a tiny
random-weight Gemma 4 (``Gemma4ForConditionalGeneration``, byte tokenizer, a template that
renders no tools). A random-weight model writes no tool call of its own, and training one
to write it costs minutes on a CPU, so the second and third tests script what the decoder
emits (Gemma 4's reasoning channel and call, cut into small deltas as a decoder streams
them): everything else — prompt rendering, the parser the architecture selects, the
OpenAI answer and its stream — is the endpoint's own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from serving_assets import CACHE, TOOLS

from akka_optimize.serving.engine import StepEvent
from akka_optimize.serving.parsers import GEMMA4_THINK_CLOSE, GEMMA4_THINK_OPEN, gemma4_call_text
from helpers import byte_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from families import FAMILIES, build  # noqa: E402

THOUGHT = "Paris is a city."
SCRIPT = (
    GEMMA4_THINK_OPEN
    + THOUGHT
    + GEMMA4_THINK_CLOSE
    + gemma4_call_text("get_weather", {"city": "Paris"})
)
QUESTION = {"role": "user", "content": "Weather in Paris?"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[Any, Any]]:
    """(HTTP client of the worker app, its engine) over the tiny Gemma 4."""
    from fastapi.testclient import TestClient

    from akka_optimize.serving.transformers_engine import TransformersEngine
    from akka_optimize.serving.worker_app import create_worker_app
    from akka_optimize.serving.worker_state import WorkerState

    base = CACHE / "tiny-gemma4-serving"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / "tiny-gemma4-serving.lock")):
        if not (base / "tokenizer_config.json").exists():
            build(next(f for f in FAMILIES if f.name == "gemma4"), base)
            byte_tokenizer(base)
    engine = TransformersEngine(base, max_context=1024, device="cpu", precision="fp32")
    state = WorkerState(engine, "tiny/gemma4", max_rank=8, token=None)
    with TestClient(create_worker_app(state)) as client:
        yield client, engine


@pytest.fixture
def scripted(endpoint, monkeypatch):
    """The engine's decoder replaced by one that streams :data:`SCRIPT` in 5-character
    deltas (the prompt it was given is kept in ``prompts``)."""
    client, engine = endpoint
    prompts: list[list[int]] = []

    def stream(prompt_ids, adapter, params) -> Iterator[StepEvent]:
        prompts.append(list(prompt_ids))
        cuts = range(0, len(SCRIPT), 5)
        for i in cuts:
            last = i + 5 >= len(SCRIPT)
            yield StepEvent(
                0, SCRIPT[i : i + 5], "stop" if last else None, len(cuts) if last else 0
            )

    monkeypatch.setattr(engine, "stream", stream)
    return client, engine, prompts


def _chat(client, **kw) -> Any:
    body = {"model": "tiny/gemma4", "messages": [QUESTION], "tools": TOOLS, "max_tokens": 8}
    r = client.post("/v1/chat/completions", json={**body, **kw})
    assert r.status_code == 200, r.text
    return r


def test_a_gemma4_endpoint_on_the_transformers_engine_takes_tools(endpoint):
    client, engine = endpoint
    assert engine.architecture == "Gemma4ForConditionalGeneration"
    info = client.get("/v1/models").json()
    assert [m["id"] for m in info["data"]] == ["tiny/gemma4"]
    answer = _chat(client, temperature=0).json()["choices"][0]
    assert answer["finish_reason"] in ("stop", "length", "tool_calls")


def test_the_call_and_the_reasoning_come_back_apart(scripted):
    client, engine, prompts = scripted
    msg = _chat(client, temperature=0).json()["choices"][0]
    assert msg["finish_reason"] == "tool_calls"
    (call,) = msg["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert msg["message"]["reasoning_content"] == THOUGHT
    assert not msg["message"]["content"]
    # the tools were offered in Gemma 4's markup (the template renders none)
    assert "<|tool_call>call:" in engine.tokenizer.decode(prompts[0])
    follow = [
        QUESTION,
        msg["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": '{"sky": "sunny"}'},
    ]
    _chat(client, messages=follow, temperature=0)
    prompt = engine.tokenizer.decode(prompts[1])
    assert gemma4_call_text("get_weather", {"city": "Paris"}) in prompt
    assert '<|tool_response>{"sky": "sunny"}<tool_response|>' in prompt


def test_a_streamed_answer_gives_the_same_call_and_reasoning(scripted):
    client, _, _ = scripted
    r = _chat(client, temperature=0, stream=True)
    chunks = [
        json.loads(line[6:])
        for line in r.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert [d["reasoning_content"] for d in deltas if d.get("reasoning_content")] == [THOUGHT]
    text = "".join(d.get("content") or "" for d in deltas)
    assert "<|tool_call>" not in text and "<|channel>" not in text
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
