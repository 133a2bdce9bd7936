"""The OpenAI-compatible chat schema an endpoint accepts and returns.

Follows the OpenAI Chat Completions API (DESIGN.md "Exact names": "OpenAI for the
chat API"): ``POST /v1/chat/completions``; ``GET /v1/models``. Every field of OpenAI's
chat request (the openai SDK's ``CompletionCreateParams``) is in exactly one of three
lists (issue 47 "Accepted means honoured"):

- :data:`HONOURED`: takes effect (each has a test showing its effect), plus
  ``guided_choice`` (vLLM's OpenAI-server extension: the answer is one of the given
  strings);
- :data:`IGNORED`: accepted and ignored on purpose, for the reason given (it never
  changes an answer, on OpenAI's API either);
- :data:`REFUSED`: answered 400 naming the field unless it holds its default (the values
  listed), for the reason given.

A field in none of them is refused with 400 naming it (``unknown_parameter``). Errors use
OpenAI's shape ``{"error": {"message", "type", "param", "code"}}`` and status 400 for a
bad request (never 500).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

_M = TypeVar("_M", bound=BaseModel)

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


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the token counts.
    ``include_obfuscation`` is accepted and ignored on purpose: it asks OpenAI to pad
    chunks with random characters against length side channels, and this endpoint adds
    no padding (an answer's text is the same either way)."""

    model_config = ConfigDict(extra="forbid")

    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class Tool(_Open):
    """``{"type": "function", "function": {...}}``."""

    type: Literal["function"] = "function"
    function: FunctionDef


#: OpenAI chat request fields that take effect here.
HONOURED = (
    "model",
    "messages",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "n",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "guided_choice",
)

_NO_CACHE = (
    "a setting of OpenAI's prompt cache, which only changes what a request costs; "
    "this endpoint keeps no prompt cache between requests"
)
_NO_USERS = (
    "an end-user id OpenAI keeps for abuse monitoring; this endpoint monitors no end "
    "users (its token decides who may call it)"
)

#: Fields accepted and ignored on purpose: field -> why (README lists them).
IGNORED: dict[str, str] = {
    "user": _NO_USERS,
    "safety_identifier": _NO_USERS,
    "prompt_cache_key": _NO_CACHE,
    "prompt_cache_options": _NO_CACHE,
    "prompt_cache_retention": _NO_CACHE,
    "metadata": "tags a completion OpenAI stores; this endpoint stores none",
}

#: Fields refused unless they hold one of the listed values (their defaults): field ->
#: (accepted values, why the others are refused).
REFUSED: dict[str, tuple[tuple[Any, ...], str]] = {
    "audio": ((None,), "this endpoint answers in text only"),
    "modalities": ((None, ["text"]), "this endpoint answers in text only"),
    "functions": ((None,), "the deprecated functions API is not served; send tools"),
    "function_call": ((None,), "the deprecated functions API is not served; send tool_choice"),
    "moderation": ((None,), "this endpoint runs no moderation model"),
    "prediction": ((None,), "predicted outputs are not implemented"),
    "reasoning_effort": ((None,), "the served models have no reasoning-effort setting"),
    "verbosity": ((None,), "the served models have no verbosity setting"),
    "web_search_options": ((None,), "this endpoint has no web search"),
    "service_tier": ((None, "auto", "default"), "this endpoint has one processing tier"),
    "store": ((None, False), "this endpoint stores no completions"),
    "parallel_tool_calls": (
        (None, True),
        "the tool-call parser returns every call the model writes and cannot limit it to one",
    ),
    "response_format": (
        (None, {"type": "text"}),
        "structured output (json_object, json_schema) needs constrained decoding, which "
        "this endpoint does not run; guided_choice limits an answer to given strings",
    ),
}

#: ``tool_choice`` values honoured; ``required`` and a named function would need the
#: call forced by constrained decoding, which this endpoint does not run.
TOOL_CHOICES = (None, "none", "auto")

#: OpenAI's limit on ``top_logprobs``.
MAX_TOP_LOGPROBS = 20


class ChatRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` (see the module docstring for which
    fields take effect).

    ``max_tokens`` counts generated tokens; ``stop`` is up to 4 strings;
    ``temperature`` 0 means greedy decoding; ``seed`` makes sampling repeatable;
    ``frequency_penalty`` and ``presence_penalty`` (-2 to 2) lower a token's logit by
    ``count · frequency_penalty + (count > 0) · presence_penalty`` where ``count`` is how
    often the answer already holds it (OpenAI's definition); ``logit_bias`` adds a bias
    (-100 to 100) to the logits of the token ids it names; ``logprobs`` returns each
    chosen token's log probability and, with ``top_logprobs`` (0 to 20), that many most
    likely alternatives; ``guided_choice`` (1 to 64 non-empty strings of at most 64
    characters, vLLM's extension) makes every answer one of those strings (a model:
    judge's score).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)  # what a torch generator takes
    n: int | None = Field(None, ge=1, le=16)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    guided_choice: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None, min_length=1, max_length=64
    )
    # ignored on purpose (IGNORED) and refused unless default (REFUSED)
    user: Any = None
    safety_identifier: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None
    metadata: Any = None
    audio: Any = None
    modalities: Any = None
    functions: Any = None
    function_call: Any = None
    moderation: Any = None
    prediction: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    web_search_options: Any = None
    service_tier: Any = None
    store: Any = None
    parallel_tool_calls: Any = None
    response_format: Any = None

    def stop_strings(self) -> list[str]:
        """``stop`` as a list (at most 4, empty strings dropped)."""
        if self.stop is None:
            return []
        items = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in items if s]


def _refuse_unhonoured(req: ChatRequest) -> None:
    """Refuse every field of :data:`REFUSED` set to a value it does not accept, a
    ``tool_choice`` that would force a call, and ``top_logprobs`` without ``logprobs``.

    Raises:
        OpenAIError: 400 ``unsupported_parameter`` naming the field and why.
    """
    for name, (accepted, why) in REFUSED.items():
        value = getattr(req, name)
        if value not in accepted:
            raise OpenAIError(
                f"This endpoint does not honour {name}={json.dumps(value)[:200]}: {why}. "
                f"Send the request without {name}.",
                param=name,
                code="unsupported_parameter",
            )
    if req.tool_choice not in TOOL_CHOICES:
        raise OpenAIError(
            f"This endpoint does not honour tool_choice={json.dumps(req.tool_choice)[:200]}: "
            "forcing a tool call needs constrained decoding, which this endpoint does not "
            "run. Send tool_choice auto or none.",
            param="tool_choice",
            code="unsupported_parameter",
        )
    if req.top_logprobs is not None and not req.logprobs:
        raise OpenAIError(
            "top_logprobs needs logprobs true (as on OpenAI's API).",
            param="top_logprobs",
            code="invalid_value",
        )


def validate_body(model: type[_M], body: Any, what: str, extensions: str) -> _M:
    """``body`` validated as ``model`` (a pydantic model refusing unknown fields).

    Args:
        what: the request named in refusals (``chat request``).
        extensions: the fields beyond OpenAI's that this endpoint serves, for the
            refusal of an unknown field.

    Raises:
        OpenAIError: 400 naming the first field that OpenAI's request does not have
            (``unknown_parameter``) or whose value is invalid (``invalid_value``).
    """
    if not isinstance(body, dict):
        raise OpenAIError("The request body must be a JSON object.", code="invalid_body")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-"))
        if e["type"] == "extra_forbidden":
            raise OpenAIError(
                f"Unrecognized request argument supplied: {loc}. It is not a field of "
                f"OpenAI's {what} nor an extension this endpoint serves ({extensions}); "
                "remove it.",
                param=loc,
                code="unknown_parameter",
            ) from exc
        raise OpenAIError(
            f"Invalid value for {loc or 'request'}: {e['msg']}.",
            param=loc or None,
            code="invalid_value",
        ) from exc


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a decoded JSON body.

    Raises:
        OpenAIError: 400 naming the first invalid field (``param``) and the problem: a
            field OpenAI's chat request does not have (``unknown_parameter``), a field
            not honoured here (``unsupported_parameter``), or a bad value.
    """
    req = validate_body(ChatRequest, body, "chat request", "guided_choice")
    _refuse_unhonoured(req)
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
