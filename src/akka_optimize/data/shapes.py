"""Row shapes people bring from other tools, refused with the row rewritten as messages.

A ShareGPT row (``{"conversations": [{"from": "human"|"gpt"|"system"|…, "value": …}]}``)
or an Alpaca row (``{"instruction", "input"?, "output"}``) is not a training row here
(DATA-AND-TRAINING-RULES.md §1: a row is ``{"messages": [...]}`` or a single turn
``{"prompt", "completion"}``). Rather than guess at a mapping silently, registration
refuses the row with a sentence that names its shape and shows the same row written as
``messages``, so the user can convert the file knowingly. The rewrite is the mapping:

- ShareGPT ``from``: ``human``/``user`` → ``user``, ``gpt``/``assistant``/``model`` →
  ``assistant``, ``system`` → ``system``, ``tool``/``observation``/``function_response``
  → ``tool``, ``function_call`` → ``assistant``; ``value`` → ``content``.
- Alpaca: ``system`` (when present) → a system message; ``instruction``, then ``input``
  after a blank line when not empty → the user message; ``output`` → the assistant message.
"""

from __future__ import annotations

import json
from typing import Any

SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "function_call": "assistant",
}
SHOWN_CHARS = 400


def _sharegpt(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    turns = obj.get("conversations")
    if not isinstance(turns, list) or not turns:
        return None
    if not all(isinstance(t, dict) and "from" in t and "value" in t for t in turns):
        return None
    return [
        {"role": SHAREGPT_ROLES.get(str(t["from"]).lower(), str(t["from"])), "content": t["value"]}
        for t in turns
    ]


def _alpaca(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    if not (isinstance(obj.get("instruction"), str) and isinstance(obj.get("output"), str)):
        return None
    user = obj["instruction"]
    if isinstance(obj.get("input"), str) and obj["input"].strip():
        user += "\n\n" + obj["input"]
    msgs = [{"role": "system", "content": obj["system"]}] if obj.get("system") else []
    return [
        *msgs,
        {"role": "user", "content": user},
        {"role": "assistant", "content": obj["output"]},
    ]


def foreign_shape(obj: dict[str, Any]) -> str | None:
    """A sentence for a ShareGPT or Alpaca row: its shape and the row rewritten as
    ``{"messages": [...]}`` (JSON, cut at :data:`SHOWN_CHARS` characters); None for any
    other row."""
    for name, convert in (("a ShareGPT row (conversations of from/value)", _sharegpt),
                          ("an Alpaca row (instruction/input/output)", _alpaca)):  # fmt: skip
        messages = convert(obj)
        if messages is not None:
            shown = json.dumps({"messages": messages}, ensure_ascii=False)
            if len(shown) > SHOWN_CHARS:
                shown = shown[:SHOWN_CHARS] + "…"
            return (
                f"this is {name}, not a training row; write it as messages, for this row: {shown}"
            )
    return None
