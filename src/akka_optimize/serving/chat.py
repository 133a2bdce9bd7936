"""Turn an OpenAI chat request into prompt tokens.

- Instructions (seeds/001 "Other changes"): a request with no ``system`` or
  ``developer`` message gets the model's training instructions as its system
  message; ``developer`` is rendered as ``system``.
- Tools: a chat template that renders tools itself (it mentions ``tools``) gets
  them through ``apply_chat_template(tools=…)``, each object's keys in sorted order as
  training rows are stored (:func:`canonical`); otherwise a system text offers them
  (:func:`~.parsers.tools_prompt`) in the markup of the architecture's parser, an
  assistant's calls are written in that markup (``<tool_call>`` blocks for Hermes),
  and a tool answer as a user turn holding a tool-response block (the layout of Qwen
  2.5's template).
"""

from __future__ import annotations

import json
from typing import Any

from .parsers import GEMMA4, markup_for, parsers_for, tools_prompt
from .schema import ChatRequest, Message, OpenAIError


def _offered_tools(req: ChatRequest) -> list[dict[str, Any]]:
    """The tools offered (``tool_choice`` is none, auto or absent: the schema refuses
    the values that would force a call, :data:`~.schema.TOOL_CHOICES`)."""
    if not req.tools or req.tool_choice == "none":
        return []
    return [t.model_dump(exclude_none=True) for t in req.tools]


def check_tools_supported(req: ChatRequest, architecture: str) -> bool:
    """Whether the request offers tools; refuse when ``architecture`` has no parser.

    Raises:
        OpenAIError: 400 naming the architecture (seeds/001 "Tool calls and reasoning").
    """
    if not _offered_tools(req):
        return False
    if parsers_for(architecture).tool_calls is None:
        raise OpenAIError(
            f"This endpoint's model has the architecture {architecture}, which has no "
            "tool-call parser, so it cannot be offered tools. Send the request without "
            "tools, or serve a model whose architecture has a parser "
            "(training endpoints info lists them).",
            param="tools",
            code="tools_not_supported",
        )
    return True


def _message_dict(m: Message, native_tools: bool, architecture: str) -> dict[str, Any]:
    role = "system" if m.role == "developer" else m.role
    text = m.text()
    if m.role == "assistant" and m.tool_calls:
        if native_tools:
            calls = [
                {
                    "type": "function",
                    "id": c.id,
                    "function": {"name": c.function.name, "arguments": _args(c.function)},
                }
                for c in m.tool_calls
            ]
            return {"role": "assistant", "content": text, "tool_calls": calls}
        write = markup_for(architecture).write_call
        blocks = [write(c.function.name, c.function.arguments) for c in m.tool_calls]
        return {"role": "assistant", "content": "\n".join(([text] if text else []) + blocks)}
    if m.role == "tool" and not native_tools:
        if markup_for(architecture) is GEMMA4:
            return {"role": "user", "content": f"<|tool_response>{text}<tool_response|>"}
        return {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
    out: dict[str, Any] = {"role": role, "content": text}
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    return out


def _args(f: Any) -> Any:
    if isinstance(f.arguments, str):
        try:
            return canonical(json.loads(f.arguments))
        except ValueError:
            return f.arguments
    return canonical(f.arguments)


def canonical(value: Any) -> Any:
    """``value`` with every object's keys in sorted order, as a registered dataset stores
    its rows (:func:`akka_optimize.registry.blobs.canonical_line`): a template renders a
    row's ``tools`` and call arguments in key order (``tojson``), so a request's must be
    in the same order for the prompt to be the one the adapter was trained on, whatever
    order the client sent."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def render_prompt(
    tokenizer: Any,
    req: ChatRequest,
    *,
    architecture: str,
    instructions: str | None,
) -> list[int]:
    """Prompt token ids for ``req`` (the assistant turn opened, ready to generate).

    Raises:
        OpenAIError: tools offered to an architecture without a parser, or the chat
            template failing on the messages (400 naming ``messages``).
    """
    tools = _offered_tools(req) if check_tools_supported(req, architecture) else []
    template = tokenizer.chat_template or ""
    native = bool(tools) and "tools" in str(template)
    msgs = [_message_dict(m, native, architecture) for m in req.messages]
    if not any(m.role in ("system", "developer") for m in req.messages) and instructions:
        msgs.insert(0, {"role": "system", "content": instructions})
    if tools and not native:
        offer = tools_prompt(tools, markup_for(architecture))
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + offer}
        else:
            msgs.insert(0, {"role": "system", "content": offer})
    kw: dict[str, Any] = {"tools": canonical(tools)} if native else {}
    try:
        enc = tokenizer.apply_chat_template(
            msgs, add_generation_prompt=True, tokenize=True, return_dict=True, **kw
        )
    except Exception as exc:  # jinja errors name the template's own complaint
        raise OpenAIError(
            f"The model's chat template cannot render these messages: {exc}",
            param="messages",
            code="invalid_messages",
        ) from exc
    return list(enc["input_ids"])
