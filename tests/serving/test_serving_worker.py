"""The endpoint worker answers the OpenAI API: the real ``openai`` client against it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from serving_assets import CALL_TEXT, FINAL_ANSWER, INSTRUCTIONS, TOOLS

from akka_optimize import forkserver
from akka_optimize.serving.check import CHECK_PROMPTS, trainer_greedy


@pytest.fixture(scope="module")
def client(worker) -> openai.OpenAI:
    return openai.OpenAI(base_url=worker.url + "/v1", api_key=worker.token, max_retries=0)


def greedy(client: openai.OpenAI, model: str, prompt: str, **kw) -> str:
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=16,
        **kw,
    )
    return r.choices[0].message.content


@pytest.mark.skipif(
    any(Path(n).exists() for n in forkserver._GPU_NODES), reason="a GPU worker starts fresh"
)
def test_the_worker_is_forked_with_its_imports_done_where_it_can_use_no_gpu(worker, client):
    """On a machine without a GPU the worker comes from the fork server (its torch,
    transformers and peft imported once), and is what `ps` shows as the worker."""
    assert isinstance(worker.proc, forkserver.ForkedProcess)
    cmdline = Path(f"/proc/{worker.proc.pid}/cmdline").read_bytes().decode()
    assert "-m akka_optimize.serving.worker --spec" in cmdline
    assert worker.proc.poll() is None and client.models.list().data


def test_models_lists_the_base_and_every_adapter_by_name(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["tiny/base", "proj/alpha:v1", "proj/beta:v1", "proj/tools:v1"]


def test_two_adapters_answer_differently_and_match_the_trainer(client, tiny_model_dir, lora_dirs):
    served = {
        m: [greedy(client, m, p) for p in CHECK_PROMPTS]
        for m in ("tiny/base", "proj/alpha:v1", "proj/beta:v1")
    }
    assert served["proj/alpha:v1"] != served["proj/beta:v1"]
    assert served["proj/alpha:v1"] != served["tiny/base"]
    for name, key in (("proj/alpha:v1", "alpha"), ("proj/beta:v1", "beta")):
        trained = trainer_greedy(tiny_model_dir, lora_dirs[key])
        assert served[name] == trained["adapter"]
        assert served["tiny/base"] == trained["base"]


def test_streamed_answer_equals_the_whole_answer(client):
    whole = greedy(client, "proj/alpha:v1", "Say hello.")
    stream = client.chat.completions.create(
        model="proj/alpha:v1",
        messages=[{"role": "user", "content": "Say hello."}],
        temperature=0,
        max_tokens=16,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_n_two_with_a_seed_gives_two_repeatable_answers(client):
    kw = dict(
        model="tiny/base",
        messages=[{"role": "user", "content": "Hi"}],
        n=2,
        seed=7,
        max_tokens=8,
        temperature=1.0,
    )
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert a.choices[0].message.content != a.choices[1].message.content
    assert a.usage.completion_tokens > 0


def test_stop_string_ends_the_answer_before_it(client):
    whole = greedy(client, "proj/beta:v1", "Name a colour.")
    stop = whole[3:6]
    cut = greedy(client, "proj/beta:v1", "Name a colour.", stop=[stop])
    assert cut == whole[: whole.find(stop)]


def test_tool_call_round_trip(client):
    q = {"role": "user", "content": "Weather in Paris?"}
    r = client.chat.completions.create(
        model="proj/tools:v1", messages=[q], tools=TOOLS, temperature=0, max_tokens=40
    )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = msg.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    follow = [
        q,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'},
    ]
    r2 = client.chat.completions.create(
        model="proj/tools:v1", messages=follow, tools=TOOLS, temperature=0, max_tokens=40
    )
    # the answer learned only after a tool response (the tiny adapter may run on past it)
    assert r2.choices[0].message.content.startswith(FINAL_ANSWER)
    assert r2.choices[0].finish_reason != "tool_calls"
    assert not r2.choices[0].message.tool_calls


def test_streamed_tool_call_arrives_as_a_structured_call(client):
    stream = client.chat.completions.create(
        model="proj/tools:v1",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        temperature=0,
        max_tokens=40,
        stream=True,
    )
    chunks = [c for c in stream if c.choices]
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["get_weather"]
    assert "<tool_call>" not in "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_without_tools_the_call_stays_text(client):
    # the raw generation is the trained Hermes block; nothing is parsed when no tools are offered
    r = client.chat.completions.create(
        model="proj/tools:v1",
        messages=[
            {"role": "system", "content": INSTRUCTIONS + "\n\n" + _tools_system()},
            {"role": "user", "content": "Weather in Paris?"},
        ],
        temperature=0,
        max_tokens=40,
    )
    assert r.choices[0].message.content.startswith(CALL_TEXT)


def _tools_system() -> str:
    from akka_optimize.serving.parsers import hermes_tools_prompt

    return hermes_tools_prompt(TOOLS)


def test_a_request_without_system_message_gets_the_training_instructions(client):
    plain = greedy(client, "proj/tools:v1", "Name a colour.")
    r = client.chat.completions.create(
        model="proj/tools:v1",
        temperature=0,
        max_tokens=16,
        messages=[
            {"role": "developer", "content": INSTRUCTIONS},
            {"role": "user", "content": "Name a colour."},
        ],
    )
    assert r.choices[0].message.content == plain
    other = client.chat.completions.create(
        model="proj/tools:v1",
        temperature=0,
        max_tokens=16,
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Name a colour."},
        ],
    )
    assert other.choices[0].message.content != plain


@pytest.mark.parametrize(
    "body, param, code",
    [
        (
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
            "model",
            "model_not_found",
        ),
        (
            {
                "model": "tiny/base",
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": -1,
            },
            "max_tokens",
            "invalid_value",
        ),
        (
            {"model": "tiny/base", "messages": [{"role": "wizard", "content": "x"}]},
            "messages.0.role",
            "invalid_value",
        ),
        ({"model": "tiny/base", "messages": "hello"}, "messages", "invalid_value"),
        ({"model": "tiny/base", "messages": []}, "messages", "invalid_value"),
        (
            {"model": "tiny/base", "messages": [{"role": "user", "content": "word " * 600}]},
            "messages",
            "context_length_exceeded",
        ),
        (
            {
                "model": "tiny/base",
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 100000,
            },
            "messages",
            "context_length_exceeded",
        ),
        (
            {"model": "tiny/base", "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.tool_call_id",
            "invalid_value",
        ),
        (
            {
                "model": "tiny/base",
                "messages": [{"role": "user", "content": "x"}],
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "zz"}},
            },
            "tool_choice",
            "unsupported_parameter",
        ),
    ],
)
def test_bad_requests_get_openai_style_400(worker, body, param, code):
    r = httpx.post(worker.url + "/v1/chat/completions", json=body, headers=worker.headers())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")
    assert err["message"]


def test_broken_json_is_a_400(worker):
    r = httpx.post(
        worker.url + "/v1/chat/completions",
        content=b"{oops",
        headers={**worker.headers(), "content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"


def test_openai_client_raises_bad_request_for_an_unknown_model(client):
    with pytest.raises(openai.BadRequestError) as exc:
        greedy(client, "other/model", "hi")
    assert "does not exist on this endpoint" in str(exc.value)


def test_the_worker_refuses_requests_without_its_token(worker):
    r = httpx.get(worker.url + "/v1/models")
    assert r.status_code == 401


def test_a_dead_workers_sentence_leaves_out_progress_bars_and_warnings():
    import signal

    from akka_optimize.serving.process import exit_sentence, meaningful_lines

    log = (
        "Loading weights:   0%|          | 0/20 [00:00<?, ?it/s]\r"
        "Loading weights: 100%|██████████| 20/20 [00:00<00:00, 28856.58it/s]\n"
        "/x/modeling_utils.py:3312: FutureWarning: `is_gradient_checkpointing` is deprecated\n"
        "  warnings.warn(\n"
        "\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    assert meaningful_lines(log) == ["RuntimeError: CUDA error: device-side assert triggered"]
    assert exit_sentence(-signal.SIGKILL, "") == (
        "the worker was killed (SIGKILL; the machine may have run out of memory)"
    )
    assert exit_sentence(-signal.SIGTERM, "") == "the worker was stopped by SIGTERM"
    assert exit_sentence(1, "ValueError: bad") == "the worker exited with status 1: ValueError: bad"
