"""The OpenAI-compatible chat schema an endpoint accepts and returns.

Follows the OpenAI Chat Completions API (DESIGN.md "Exact names": "OpenAI for the
chat API"): ``POST /v1/chat/completions`` with ``messages``, ``temperature``,
``top_p``, ``max_tokens`` (or ``max_completion_tokens``), ``stop``, ``seed``, ``n``,
``stream``, ``tools`` and ``tool_choice``, plus ``guided_choice`` (vLLM's OpenAI-server
extension: the answer is one of the given strings); ``GET /v1/models``. Errors use OpenAI's
shape ``{"error": {"message", "type", "param", "code"}}`` and status 400 for a bad
request (never 500).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROLES = ("system", "developer", "user", "assistant", "tool")


class OpenAIError(Exception):
    """A refusal returned as ``{"error": {"message", "type", "param", "code"}}``.

    Args:
        message: a sentence naming what is wrong and where.
        param: the request field concerned, as a dotted path (``messages.2.role``).
        code: a stable identifier (``model_not_found``, ``context_length_exceeded``).
        status: the HTTP status (400 unless stated).
        type: OpenAI's error type (``invalid_request_error``, ``server_error``).
    """

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    """``{"name", "arguments"}``: ``arguments`` is a JSON string (OpenAI) or an object."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Open):
    """One call an assistant message made."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    """A chat message. ``content`` may be a string or a list of text parts."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        """The message's text: a string as is, text parts joined; None as ""."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        out = []
        for part in self.content:
            if part.get("type") == "text":
                out.append(str(part.get("text", "")))
        return "".join(out)


class FunctionDef(_Open):
    """A function offered to the model: name, description, JSON-schema parameters."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    """``{"type": "function", "function": {...}}``."""

    type: Literal["function"] = "function"
    function: FunctionDef


class ChatRequest(_Open):
    """The body of ``POST /v1/chat/completions``.

    ``max_tokens`` counts generated tokens; ``stop`` is up to 4 strings;
    ``temperature`` 0 means greedy decoding; ``seed`` makes sampling repeatable;
    ``guided_choice`` (1 to 64 non-empty strings of at most 64 characters, vLLM's
    extension) makes every answer one of those strings (a model: judge's score).
    """

    model: str
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    guided_choice: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None, min_length=1, max_length=64
    )

    def stop_strings(self) -> list[str]:
        """``stop`` as a list (at most 4, empty strings dropped)."""
        if self.stop is None:
            return []
        items = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in items if s]


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a decoded JSON body.

    Raises:
        OpenAIError: 400 naming the first invalid field (``param``) and the problem.
    """
    if not isinstance(body, dict):
        raise OpenAIError("The request body must be a JSON object.", code="invalid_body")
    try:
        req = ChatRequest.model_validate(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-"))
        raise OpenAIError(
            f"Invalid value for {loc or 'request'}: {e['msg']}.",
            param=loc or None,
            code="invalid_value",
        ) from exc
    if len(req.stop_strings()) > 4:
        raise OpenAIError("stop holds at most 4 strings.", param="stop", code="invalid_value")
    for i, m in enumerate(req.messages):
        if m.role == "tool" and not m.tool_call_id:
            raise OpenAIError(
                f"messages.{i}: a tool message needs tool_call_id.",
                param=f"messages.{i}.tool_call_id",
                code="invalid_value",
            )
    return req


def new_id(prefix: str = "chatcmpl") -> str:
    """A response id such as ``chatcmpl-1f0c…``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    """Unix seconds, for ``created``."""
    return int(time.time())
