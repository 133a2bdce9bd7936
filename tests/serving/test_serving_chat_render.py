"""A request's tools render as a registered row's do (sorted keys), whatever the client's
key order: the prompt an endpoint builds is the one the adapter was trained on."""

from __future__ import annotations

from pathlib import Path

from akka_optimize.registry.blobs import canonical_line
from akka_optimize.serving.chat import render_prompt
from akka_optimize.serving.schema import parse_chat_request
from helpers import byte_tokenizer

TEMPLATE = Path(__file__).parents[1] / "jobs" / "templates" / "qwen2_5.jinja"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
REVERSED = {
    "function": {
        "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"},
        "description": "The weather in a city.",
        "name": "get_weather",
    },
    "type": "function",
}


def test_tools_in_any_key_order_render_as_the_stored_row_renders(tmp_path) -> None:
    import json

    from transformers import AutoTokenizer

    byte_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    tok.chat_template = TEMPLATE.read_text()
    question = [{"role": "user", "content": "Weather in Paris?"}]
    stored = json.loads(canonical_line({"tools": [TOOL], "messages": question}))
    enc = tok.apply_chat_template(
        stored["messages"],
        tools=stored["tools"],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )
    trained = list(enc["input_ids"])
    for tool in (TOOL, REVERSED):
        req = parse_chat_request({"model": "m", "messages": question, "tools": [tool]})
        ids = render_prompt(tok, req, architecture="LlamaForCausalLM", instructions=None)
        assert ids == trained
