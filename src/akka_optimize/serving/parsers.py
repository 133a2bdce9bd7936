"""Tool-call and reasoning parsers, one per model architecture (seeds/001 "Tool calls
and reasoning").

A parser turns generated text into the answer, the reasoning and the tool calls,
separately. This release ships the Hermes format (NousResearch Hermes 2 Pro, Qwen
2.5/3), the format vLLM calls ``hermes`` for tool calls and ``deepseek_r1``/``qwen3``
for reasoning:

- a tool call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- reasoning is ``<think>…</think>`` before the answer.

The tiny test model and SmolLM2 (``LlamaForCausalLM`` with the ChatML template of
SmolLM2) have no tool format of their own; they get the Hermes parser, and tools
are offered in the system message the Hermes way (:func:`hermes_tools_prompt`)
because SmolLM2's chat template renders no tools. An architecture missing from
:data:`PARSERS` has no parser: a request offering it tools is refused, naming the
architecture.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ParserSpec:
    """The parsers of one architecture: names as vLLM spells them (``None`` = none)."""

    tool_calls: str | None
    reasoning: str | None


#: Architecture (``config.architectures[0]``) → parsers. Llama covers SmolLM2 and the
#: tiny test model (see the module docstring).
PARSERS: dict[str, ParserSpec] = {
    "LlamaForCausalLM": ParserSpec("hermes", "deepseek_r1"),
    "Qwen2ForCausalLM": ParserSpec("hermes", "deepseek_r1"),
    "Qwen3ForCausalLM": ParserSpec("hermes", "qwen3"),
    "Qwen3MoeForCausalLM": ParserSpec("hermes", "qwen3"),
}


def parsers_for(architecture: str) -> ParserSpec:
    """The parsers of ``architecture``; ``ParserSpec(None, None)`` when it has none."""
    return PARSERS.get(architecture, ParserSpec(None, None))


def parsers_table() -> dict[str, dict[str, str | None]]:
    """Every architecture with its parsers, for ``training endpoints info``."""
    return {a: {"toolCalls": p.tool_calls, "reasoning": p.reasoning} for a, p in PARSERS.items()}


@dataclass
class Parsed:
    """Generated text split: ``content`` (the answer), ``reasoning`` and ``tool_calls``
    (OpenAI shape: ``{"id", "type": "function", "function": {"name", "arguments"}}``,
    ``arguments`` a JSON string)."""

    content: str
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def _call(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)},
    }


_TOOL_RE = re.compile(re.escape(TOOL_OPEN) + r"(.*?)" + re.escape(TOOL_CLOSE), re.S)


def parse_hermes(text: str, *, tools: bool, reasoning: bool) -> Parsed:
    """Split ``text`` into reasoning, answer and tool calls (Hermes format).

    A ``<tool_call>`` block whose body is not a JSON object with a ``name`` stays in
    the answer as text, so nothing generated is lost. With ``tools`` False, tool
    blocks are not parsed; with ``reasoning`` False, think blocks are not.
    """
    reason = None
    if reasoning:
        start = text.find(THINK_OPEN)
        end = text.find(THINK_CLOSE)
        if end != -1 and (start == -1 or start < end):
            s = start + len(THINK_OPEN) if start != -1 else 0
            reason = text[s:end].strip()
            text = text[: max(start, 0)] + text[end + len(THINK_CLOSE) :]
    calls: list[dict[str, Any]] = []
    if tools:
        kept = []
        pos = 0
        for m in _TOOL_RE.finditer(text):
            try:
                call = _call(json.loads(m.group(1).strip()))
            except ValueError:
                call = None
            kept.append(text[pos : m.start()] if call else text[pos : m.end()])
            pos = m.end()
            if call:
                calls.append(call)
        kept.append(text[pos:])
        text = "".join(kept)
    return Parsed(
        content=text.strip() if (calls or reason) else text, reasoning=reason, tool_calls=calls
    )


class StreamSplitter:
    """Incremental Hermes parsing for ``stream: true``.

    Text is released as answer deltas as soon as it cannot be the start of a
    ``<think>`` or ``<tool_call>`` tag; a think block is released as one reasoning
    delta when it closes, and a tool call as one call when its block closes.
    :meth:`finish` flushes what is held back.
    """

    def __init__(self, *, tools: bool, reasoning: bool) -> None:
        self.tags = ([TOOL_OPEN] if tools else []) + ([THINK_OPEN] if reasoning else [])
        self.buf = ""
        self.inside: str | None = None

    def feed(self, delta: str) -> list[tuple[str, Any]]:
        """Events ``("content", str)``, ``("reasoning", str)``, ``("tool_call", dict)``."""
        self.buf += delta
        out: list[tuple[str, Any]] = []
        while True:
            if self.inside:
                close = TOOL_CLOSE if self.inside == TOOL_OPEN else THINK_CLOSE
                i = self.buf.find(close)
                if i == -1:
                    return out
                block, self.buf = self.buf[:i], self.buf[i + len(close) :]
                out.extend(self._block(self.inside, block))
                self.inside = None
                continue
            hits = [(self.buf.find(t), t) for t in self.tags if t in self.buf]
            if hits:
                i, tag = min(hits)
                if i:
                    out.append(("content", self.buf[:i]))
                self.buf = self.buf[i + len(tag) :]
                self.inside = tag
                continue
            keep = self._partial_tag_len()
            if len(self.buf) > keep:
                out.append(("content", self.buf[: len(self.buf) - keep]))
                self.buf = self.buf[len(self.buf) - keep :]
            return out

    def _partial_tag_len(self) -> int:
        best = 0
        for t in self.tags:
            for k in range(1, len(t)):
                if self.buf.endswith(t[:k]):
                    best = max(best, k)
        return best

    def _block(self, tag: str, block: str) -> list[tuple[str, Any]]:
        if tag == THINK_OPEN:
            return [("reasoning", block.strip())]
        try:
            call = _call(json.loads(block.strip()))
        except ValueError:
            call = None
        return [("tool_call", call)] if call else [("content", TOOL_OPEN + block + TOOL_CLOSE)]

    def finish(self) -> list[tuple[str, Any]]:
        """Release held-back text (an unclosed block is released as answer text)."""
        rest = (self.inside or "") + self.buf
        self.buf, self.inside = "", None
        return [("content", rest)] if rest else []


def hermes_tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The Hermes 2 Pro system text offering ``tools`` (OpenAI tool objects)."""
    sigs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You are a function calling AI model. You are provided with function signatures "
        "within <tools></tools> XML tags. You may call one or more functions to assist "
        "with the user query. Don't make assumptions about what values to plug into "
        "functions.\n<tools>\n"
        + sigs
        + "\n</tools>\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def hermes_call_text(name: str, arguments: Any) -> str:
    """One call as the model writes it; ``arguments`` as an object or a JSON string is
    rendered once, as an object (behaviours.md 8)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_OPEN}\n{body}\n{TOOL_CLOSE}"
