"""Shared data of the serving tests: tools, the trained tool adapter, random adapters."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import REPO, make_random_adapter  # noqa: F401 (the serving tests import it here)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
FINAL_ANSWER = "Sunny."
INSTRUCTIONS = "You answer weather questions."
MARGIN = 0.2
"""How far (logits) each trained token of the tool adapter leads the runner-up."""
CACHE = Path(os.environ.get("AKKA_OPTIMIZE_TEST_CACHE", REPO / ".cache" / "test-models"))


def train_tool_adapter(
    base_dir: Path,
    dest: Path,
    *,
    architecture: str = "LlamaForCausalLM",
    call_text: str = CALL_TEXT,
    targets: str = "all-linear",
) -> Path:
    """A LoRA adapter trained until greedy decoding reproduces ``call_text`` (a Hermes
    tool call unless told otherwise; the prompt is rendered as an endpoint of
    ``architecture`` renders it) for the weather question and the final answer after the
    tool's response: every
    target token leads the runner-up by :data:`MARGIN` logits (far above the rounding of
    merging the adapter), except the closing EOS. The tiny model's EOS is its padding
    token, whose tied embedding row is zero, so its logit stays 0 whatever the adapter
    does (the answers end at a stop string or ``max_tokens`` instead)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from akka_optimize.serving.chat import render_prompt
    from akka_optimize.serving.schema import parse_chat_request

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules=targets))
    q = {"role": "user", "content": "Weather in Paris?"}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    answer = {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}
    rows = []
    for msgs, target in (([q], call_text), ([q, call, answer], FINAL_ANSWER)):
        req = parse_chat_request({"model": "m", "messages": msgs, "tools": TOOLS})
        prompt = render_prompt(tok, req, architecture=architecture, instructions=INSTRUCTIONS)
        ids = prompt + tok.encode(target, add_special_tokens=False) + [tok.eos_token_id]
        rows.append((prompt, ids))
    opt = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=5e-3)
    peft.train()
    for _ in range(1000):
        exact = True
        for prompt, ids in rows:
            k = len(ids) - len(prompt)  # logits of the target positions only
            logits = peft(input_ids=torch.tensor([ids]), logits_to_keep=k + 1).logits[0, :-1]
            target = torch.tensor(ids[len(prompt) :])
            torch.nn.functional.cross_entropy(logits, target).backward()
            top2 = logits.detach().topk(2, dim=-1)
            mine = logits.detach().gather(1, target[:, None]).squeeze(1)
            other = torch.where(top2.indices[:, 0] == target, top2.values[:, 1], top2.values[:, 0])
            exact = exact and bool(((mine - other)[:-1] >= MARGIN).all())
        if exact:
            break
        opt.step()
        opt.zero_grad()
    peft.save_pretrained(dest)
    return dest
