"""Response schemas of endpoints (``/v1/training/endpoints``) and of the OpenAI-compatible
routes they forward (OpenAI's shapes, open to the fields a serving engine adds)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from .common import View, iso_time


class ServedModel(View):
    """A model an endpoint serves."""

    model: str = Field(description="Its served name, as OpenAI's model field.")
    kind: str = Field(description="base or adapter.")
    ref: str = Field(description="The reference as given.")
    pinned: str = Field(description="The pinned version.")
    rank: int | None = Field(description="An adapter's LoRA rank.")
    instructions: str | None = Field(description="Instructions served as the system prompt.")
    checks: dict[str, Any] | None = Field(
        description="An adapter's serving checks: state, findings, prompts."
    )


class EndpointView(View):
    """An endpoint: one or more models behind an OpenAI-compatible base URL."""

    id: str = Field(description="The endpoint's ID (32 hex digits).")
    projectId: str = Field(description="Its project's ID.")
    projectName: str | None = Field(description="Its project's name; null when gone.")
    state: str = Field(description="QUEUED, STARTING, READY, FAILED, STOPPED, DELETED…")
    activity: str | None = Field(description="What it is doing (or its queue place).")
    error: str | None = Field(description="Why it failed: one sentence.")
    baseModel: str = Field(description="The base model it serves on.")
    engine: str = Field(description="transformers or vllm.")
    models: list[ServedModel] = Field(description="The models it serves.")
    instructions: str | None = Field(description="The first model's instructions.")
    checks: dict[str, Any] = Field(description="Served name → an adapter's serving checks.")
    openaiBaseUrl: str = Field(description="The OpenAI-compatible base path.")
    idleSeconds: float | None = Field(description="Seconds since its last request.")
    createdAt: str | None = iso_time("When it was created")


class EndpointList(View):
    """Endpoints the caller sees."""

    endpoints: list[EndpointView] = Field(description="The endpoints.")


class Parsers(View):
    """How one architecture's output is parsed."""

    toolCalls: str | None = Field(description="The tool-call parser.")
    reasoning: str | None = Field(description="The reasoning parser.")


class EndpointsInfo(View):
    """What an endpoint can serve (seeds/001 "What an endpoint can serve")."""

    engine: str = Field(description="The serving engine: transformers or vllm.")
    maxLoraRank: int = Field(description="Largest adapter rank an endpoint loads.")
    maxAdaptersLoaded: int = Field(description="Adapters one worker keeps loaded.")
    reservedDevices: int = Field(description="Devices reserved for serving.")
    deviceType: str = Field(description="The device profile (or kind) endpoints run on.")
    maxContextTokens: int = Field(description="Longest context an endpoint serves, in tokens.")
    idleSeconds: int = Field(description="Idle seconds before an endpoint stops.")
    mergeAdapters: bool = Field(
        description="Whether the adapter being served is merged into the base weights."
    )
    precision: str = Field(
        description="The dtype endpoints hold and decode the weights in (serving.precision): "
        "auto (bf16 on cuda, fp32 on cpu), bf16 or fp32."
    )
    parsers: dict[str, Parsers] = Field(description="Architecture → its parsers.")


class _Open(View):
    model_config = ConfigDict(extra="allow")


class OpenAIModel(_Open):
    """One served model (OpenAI ``/v1/models``)."""

    id: str = Field(description="The served name.")
    object: str = Field(description="model.")
    created: int = Field(description="Unix seconds.")
    owned_by: str = Field(description="akka-optimize.")
    root: str | None = Field(None, description="The base model's served name.")
    parent: str | None = Field(None, description="The base model for an adapter, else null.")


class OpenAIModelList(_Open):
    """The models an endpoint serves, the base model first."""

    object: str = Field(description="list.")
    data: list[OpenAIModel] = Field(description="The served models.")


class ChatMessageOut(_Open):
    """The assistant's message."""

    role: str = Field(description="assistant.")
    content: str | None = Field(description="The answer; null when it only calls tools.")
    reasoning_content: str | None = Field(None, description="Parsed reasoning, if any.")
    tool_calls: list[dict[str, Any]] | None = Field(
        None, description="Calls: {id, type: function, function: {name, arguments}}."
    )


class ChatChoice(_Open):
    """One generated answer."""

    index: int = Field(description="The choice's index (0 to n - 1).")
    message: ChatMessageOut = Field(description="The generated message.")
    finish_reason: str | None = Field(description="stop, length or tool_calls.")
    logprobs: Any = Field(
        None,
        description="With logprobs true: {content: [{token, logprob, bytes, top_logprobs}], "
        "refusal: null}; else null.",
    )


class Usage(_Open):
    """Tokens read and generated."""

    prompt_tokens: int = Field(description="Tokens of the rendered prompt.")
    completion_tokens: int = Field(description="Tokens generated.")
    total_tokens: int = Field(description="prompt_tokens + completion_tokens.")


class TextChoice(_Open):
    """One legacy text completion."""

    index: int = Field(description="The choice's index (prompts times n).")
    text: str = Field(description="The generated text, after the prompt with echo.")
    finish_reason: str | None = Field(description="stop or length.")
    logprobs: Any = Field(
        None,
        description="With logprobs: {tokens, token_logprobs, top_logprobs}, the prompt's "
        "tokens first with echo (the first one's log probability null); else null.",
    )


class _Completion(_Open):
    """What a chat and a legacy text completion share."""

    id: str = Field(description="The completion's ID.")
    created: int = Field(description="Unix seconds.")
    model: str = Field(description="The served name that answered.")
    usage: Usage | None = Field(None, description="Tokens read and generated.")


class TextCompletion(_Completion):
    """A legacy text completion (OpenAI ``text_completion``)."""

    object: str = Field(description="text_completion.")
    choices: list[TextChoice] = Field(description="One per prompt and n.")


class ChatCompletion(_Completion):
    """A chat completion (OpenAI ``chat.completion``; not streamed)."""

    object: str = Field(description="chat.completion.")
    choices: list[ChatChoice] = Field(description="The answers, n of them.")
