"""A tool row trains through a run and its call comes back structured (issue 54 item 2,
F025): a model whose chat template renders tools (a tiny Llama with a byte-level tokenizer
carrying Qwen2.5's published template, tests/jobs/templates/) previews and trains a row of
tool call → tool answer → final answer with the masks the plan's ``loss`` settings give,
and an endpoint serving the trained model answers the row's question with a ``tool_calls``
entry and, given the tool's answer, the row's final answer.

The tiny model's weights are drawn with ``initializer_range`` 0.3 (transformers' default is
0.02): with embeddings that small the logits of a 64-wide model stay within about ±1 and a
LoRA adapter cannot make any answer the greedy one in a few dozen updates; at 0.3 the row
is learnt in about 40 (a constant rate of 0.01, no adapter dropout: 60 updates here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jobs_helpers import catalog_home, run_json

from helpers import LiveService, byte_tokenizer, free_port
from serving.serving_assets import TOOLS  # the serving tests' weather tool

MODEL = "test/tiny-qwen-tools"
TEMPLATE = Path(__file__).parent / "templates" / "qwen2_5.jinja"
QUESTION = {"role": "user", "content": "Weather in Paris?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'}
ROW = {
    "tools": TOOLS,
    "messages": [QUESTION, CALL, RESULT, {"role": "assistant", "content": "Sunny."}],
}


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Any:
    """A service whose catalog adds :data:`MODEL` (see the module docstring), project
    ``demo`` and dataset ``demo/tools`` (the row, four times)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from akka_optimize.catalog import load_catalog

    tmp = tmp_path_factory.mktemp("tool-rows")
    folder = tmp / "tiny-qwen-tools"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    byte_tokenizer(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = TEMPLATE.read_text()
    tok.save_pretrained(folder)
    real = load_catalog(None).get("HuggingFaceTB/SmolLM2-135M-Instruct")
    entry = {
        "repository": MODEL,
        "family": "llama",
        "modelType": "llama",
        "loraTargetModules": real.model_dump(by_alias=True)["loraTargetModules"],
        "parameters": 100_000,
        "maxContextTokens": 2048,
        "chatTemplate": "qwen2_5",
        "toolParser": "hermes",
        "source": {"kind": "local", "path": str(folder)},
        "envelope": {"cpu": {"qualifiedTokens": 2048, "memoryGiB": 1, "measured": False}},
    }
    home = catalog_home(tmp, [entry])
    svc = LiveService(home=home, config_dir=tmp / "config", port=free_port()).start()
    rows = tmp / "tools.jsonl"
    rows.write_text((json.dumps(ROW) + "\n") * 4)
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli("registry", "datasets", "register", "demo/tools", "-f", str(rows), check=True)
    svc.cli("training", "base-models", "select", MODEL, "--wait", check=True)
    try:
        yield svc, tmp
    finally:
        svc.stop()


def _marked(svc: LiveService, loss: dict[str, Any]) -> list[str]:
    r = svc.api(
        "POST",
        "/v1/training/data/preview",
        json={"plan": {"baseModel": MODEL, "config": {"loss": loss}}, "rows": [ROW]},
    )
    assert r.status_code == 200, r.text
    (row,) = r.json()["rows"]
    return [s["text"] for s in row["segments"] if s["supervised"]]


def test_the_plans_loss_settings_decide_which_parts_of_a_tool_row_train(service):
    svc, _ = service
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    # the defaults: every assistant turn, its tool calls, not the tool's answer
    assert _marked(svc, {}) == [call + "<|im_end|>", "Sunny.<|im_end|>"]
    assert _marked(svc, {"trainOnToolCalls": False}) == ["Sunny.<|im_end|>"]
    on = _marked(svc, {"trainOnToolResults": True})
    assert on[0] == call + "<|im_end|>" and on[-1] == "Sunny.<|im_end|>"
    assert len(on) == 3 and "sunny" in on[1], on
    assert _marked(svc, {"assistantTurns": "last"}) == ["Sunny.<|im_end|>"]


def test_a_trained_tool_row_is_served_back_as_a_structured_call(service):
    """The endpoint answers the row's question with the trained call, and after the tool's
    answer with the row's final answer. The request's tools are in another key order than
    the registered row's (stored with sorted keys): the endpoint renders them as the row
    was rendered (:func:`akka_optimize.serving.chat.canonical`)."""
    svc, tmp = service
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": MODEL,
        "modelName": "weather",
        "config": {
            "dataset": "demo/tools",
            "method": "sft",
            "maxSeqLength": 1024,
            "hyperparams": {
                "lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
                "training": {"epochs": 15, "microBatchPerGpu": 1, "seed": 1},
                "optimizer": {"learningRate": 0.01},
                "scheduler": {"kind": "constant", "warmupRatio": 0.0},
            },
        },
    }
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan))
    out = svc.cli("training", "runs", "start", "-f", str(path), "--yes", "--wait", "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    run = json.loads(out.stdout[out.stdout.index("{") :])
    assert run["state"] == "SUCCEEDED", run
    model = run["results"]["model"]
    ep = run_json(svc, "training", "endpoints", "create", "--model", model, "--wait")
    assert ep["state"] == "READY", ep
    name = model.split("@")[0]
    r = svc.api(
        "POST",
        f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
        json={"model": name, "messages": [QUESTION], "tools": TOOLS, "temperature": 0,
              "max_tokens": 100},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", (choice, run["results"].get("finalLoss"))
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    follow = [QUESTION, choice["message"], {**RESULT, "tool_call_id": call["id"]}]
    r = svc.api(
        "POST",
        f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
        json={"model": name, "messages": follow, "tools": TOOLS, "temperature": 0,
              "max_tokens": 20},
    )  # fmt: skip
    assert r.json()["choices"][0]["message"]["content"].startswith("Sunny."), r.text
    svc.cli("training", "endpoints", "delete", ep["id"], check=True)
