"""Tool-call and reasoning parsers, one per model architecture (seeds/001 "Tool calls
and reasoning").

A parser turns generated text into the answer, the reasoning and the tool calls,
separately. Two markups ship, each a :class:`Markup` (its tags and how a call's body
reads):

- Hermes (NousResearch Hermes 2 Pro, Qwen 2.5/3), what vLLM calls ``hermes`` for tool
  calls and ``deepseek_r1``/``qwen3`` for reasoning: a tool call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, reasoning is
  ``<think>…</think>`` before the answer;
- Gemma 4 (``gemma4``, the response template transformers 5 declares for
  ``model_type: gemma4``): a tool call is ``<|tool_call>call:NAME{key:<|"|>text<|"|>,
  n:3}<tool_call|>`` (keys unquoted, strings between ``<|"|>`` marks), reasoning is
  ``<|channel>thought\n…<channel|>``.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
GEMMA4_TOOL_OPEN, GEMMA4_TOOL_CLOSE = "<|tool_call>call:", "<tool_call|>"
GEMMA4_THINK_OPEN, GEMMA4_THINK_CLOSE = "<|channel>thought\n", "<channel|>"
GEMMA4_QUOTE = '<|"|>'


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
    "Gemma4ForConditionalGeneration": ParserSpec("gemma4", "gemma4"),
    "Gemma4ForCausalLM": ParserSpec("gemma4", "gemma4"),
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
    return _openai_call(obj["name"], obj.get("arguments", obj.get("parameters", {})))


def _openai_call(name: str, args: Any) -> dict[str, Any] | None:
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def _hermes_body(body: str) -> dict[str, Any] | None:
    try:
        return _call(json.loads(body.strip()))
    except ValueError:
        return None


_GEMMA4_NAME = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*(\{.*\})\s*", re.S)
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w\-]*)\s*:")


def gemma4_arguments(text: str) -> Any:
    """Gemma 4's argument object as Python: ``{city:<|"|>Paris<|"|>,n:3}`` → ``{"city":
    "Paris", "n": 3}`` (strings between ``<|"|>`` marks, keys unquoted, the rest JSON).

    Raises:
        ValueError: ``text`` is not such an object (an unclosed string mark included).
    """
    parts = text.split(GEMMA4_QUOTE)
    if len(parts) % 2 == 0:
        raise ValueError('an unclosed <|"|> string')
    strings = parts[1::2]
    code = "".join(
        p + (f"\x00{i}\x00" if i < len(strings) else "") for i, p in enumerate(parts[::2])
    )
    code = _BARE_KEY.sub(lambda m: f'{m.group(1)}"{m.group(2)}":', code)
    code = re.sub(r"\x00(\d+)\x00", lambda m: json.dumps(strings[int(m.group(1))]), code)
    return json.loads(code)


def _gemma4_body(body: str) -> dict[str, Any] | None:
    m = _GEMMA4_NAME.fullmatch(body)
    if not m:
        return None
    try:
        args = gemma4_arguments(m.group(2))
    except ValueError:
        return None
    return _openai_call(m.group(1), args) if isinstance(args, dict) else None


@dataclass(frozen=True)
class Markup:
    """How one model family writes reasoning and tool calls: the tags around each, how
    a call's body reads (``read_call``: body text → OpenAI call, or None when the body is
    not a call, which then stays in the answer as text) and how a call is written back
    into a prompt (``write_call(name, arguments)``, for templates that render no tools)."""

    think: tuple[str, str]
    tool: tuple[str, str]
    read_call: Callable[[str], dict[str, Any] | None]
    write_call: Callable[[str, Any], str]


HERMES = Markup(
    (THINK_OPEN, THINK_CLOSE),
    (TOOL_OPEN, TOOL_CLOSE),
    _hermes_body,
    lambda n, a: hermes_call_text(n, a),
)
GEMMA4 = Markup(
    (GEMMA4_THINK_OPEN, GEMMA4_THINK_CLOSE),
    (GEMMA4_TOOL_OPEN, GEMMA4_TOOL_CLOSE),
    _gemma4_body,
    lambda n, a: gemma4_call_text(n, a),
)
#: Parser name (as :class:`ParserSpec` spells it) → markup.
MARKUPS: dict[str, Markup] = {
    "hermes": HERMES,
    "deepseek_r1": HERMES,
    "qwen3": HERMES,
    "gemma4": GEMMA4,
}


def markup_for(architecture: str) -> Markup:
    """The markup ``architecture``'s parsers read (Hermes for one without parsers, whose
    requests offering tools are refused before generation)."""
    spec = parsers_for(architecture)
    return MARKUPS.get(spec.tool_calls or spec.reasoning or "hermes", HERMES)


def parse_generated(text: str, *, tools: bool, reasoning: bool, markup: Markup = HERMES) -> Parsed:
    """Split ``text`` into reasoning, answer and tool calls as ``markup`` writes them.

    A tool block whose body is not a call stays in the answer as text, so nothing
    generated is lost. With ``tools`` False, tool blocks are not parsed; with
    ``reasoning`` False, think blocks are not.
    """
    reason = None
    (t_open, t_close), (c_open, c_close) = markup.think, markup.tool
    if reasoning:
        start = text.find(t_open)
        end = text.find(t_close)
        if end != -1 and (start == -1 or start < end):
            s = start + len(t_open) if start != -1 else 0
            reason = text[s:end].strip()
            text = text[: max(start, 0)] + text[end + len(t_close) :]
    calls: list[dict[str, Any]] = []
    if tools:
        kept = []
        pos = 0
        for m in re.finditer(re.escape(c_open) + r"(.*?)" + re.escape(c_close), text, re.S):
            call = markup.read_call(m.group(1))
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
    """Incremental parsing for ``stream: true``.

    Text is released as answer deltas as soon as it cannot be the start of a think or
    tool tag of ``markup``; a think block is released as one reasoning delta when it
    closes, and a tool call as one call when its block closes. :meth:`finish` flushes
    what is held back.
    """

    def __init__(self, *, tools: bool, reasoning: bool, markup: Markup = HERMES) -> None:
        self.markup = markup
        self.closing = {markup.tool[0]: markup.tool[1], markup.think[0]: markup.think[1]}
        self.tags = ([markup.tool[0]] if tools else []) + ([markup.think[0]] if reasoning else [])
        self.buf = ""
        self.inside: str | None = None

    def feed(self, delta: str) -> list[tuple[str, Any]]:
        """Events ``("content", str)``, ``("reasoning", str)``, ``("tool_call", dict)``."""
        self.buf += delta
        out: list[tuple[str, Any]] = []
        while True:
            if self.inside:
                close = self.closing[self.inside]
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
        if tag == self.markup.think[0]:
            return [("reasoning", block.strip())]
        call = self.markup.read_call(block)
        return [("tool_call", call)] if call else [("content", tag + block + self.closing[tag])]

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


def gemma4_call_text(name: str, arguments: Any) -> str:
    """One call as Gemma 4 writes it (the inverse of the ``gemma4`` parser): strings
    between ``<|"|>`` marks, keys unquoted, other values as JSON; ``arguments`` as an
    object or a JSON string."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass

    def value(v: Any) -> str:
        if isinstance(v, str):
            return GEMMA4_QUOTE + v + GEMMA4_QUOTE
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return f"{GEMMA4_TOOL_OPEN}{name}{value(arguments)}{GEMMA4_TOOL_CLOSE}"


def tools_prompt(tools: list[dict[str, Any]], markup: Markup) -> str:
    """The system text offering ``tools`` to a model whose chat template renders none:
    Hermes 2 Pro's own text, or for Gemma 4 the same offer asking for its call markup."""
    if markup is not GEMMA4:
        return hermes_tools_prompt(tools)
    sigs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = gemma4_call_text("<function-name>", {"<key>": "<value>"})
    return "You can call the functions declared below. Call one by writing " + example + "\n" + sigs
