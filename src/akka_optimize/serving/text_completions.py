"""``POST /v1/completions`` on a worker: OpenAI's legacy text completions (issue 47 item 11).

What lm-eval's ``local-completions`` model sends: a ``prompt`` (text, token ids, or a
list of either: one choice per prompt), ``max_tokens`` (0 allowed with ``echo``),
``echo`` (the answer's text and logprobs start with the prompt's) and ``logprobs`` (0 to
5 alternatives per token; with ``echo`` the prompt's tokens are scored too, the first
one's log probability being ``null``), so a log-likelihood evaluation runs through an
endpoint. ``temperature``, ``top_p``, ``seed``, ``stop``, ``n``, the penalties and
``logit_bias`` act as in chat. Refused with a 400 naming the field: ``stream`` true,
``best_of`` above 1 and ``suffix`` (not implemented); ``user`` is ignored on purpose
(an end-user id, as in chat). A prompt is tokenized as the tokenizer does by default
(its special tokens added, as vLLM does) and is not wrapped in the chat template.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from .completions import gather, logit_bias_ids
from .engine import SamplingParams
from .schema import OpenAIError, new_id, now, validate_body
from .worker_state import WorkerState

#: OpenAI's limit on the legacy ``logprobs``.
MAX_LOGPROBS = 5


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(None, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    echo: bool | None = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    best_of: int | None = None
    suffix: str | None = None
    stream: bool | None = False
    stream_options: Any = None
    user: Any = None  # ignored on purpose, as in chat


def _refuse(field: str, value: Any, why: str) -> OpenAIError:
    return OpenAIError(
        f"This endpoint does not honour {field}={value!r} on /v1/completions: {why}. "
        f"Send the request without {field}.",
        param=field,
        code="unsupported_parameter",
    )


def _prompts(state: WorkerState, req: CompletionRequest) -> list[list[int]]:
    """The request's prompts as token ids.

    Raises:
        OpenAIError: 400 naming ``prompt`` for an empty prompt or a token id outside the
            vocabulary.
    """
    p = req.prompt
    items: list[Any] = [p] if isinstance(p, str) or (p and isinstance(p[0], int)) else list(p)
    tok = state.engine.tokenizer
    out = [tok(x)["input_ids"] if isinstance(x, str) else list(x) for x in items]
    vocab = len(tok)
    for i, ids in enumerate(out):
        if not ids or any(not 0 <= t < vocab for t in ids):
            raise OpenAIError(
                f"prompt {i} is empty or holds a token id outside 0 to {vocab - 1}.",
                param="prompt",
                code="invalid_value",
            )
    return out


def _check(req: CompletionRequest) -> None:
    if req.stream:
        raise _refuse("stream", True, "answers arrive whole")
    if req.best_of not in (None, 1):
        raise _refuse("best_of", req.best_of, "best_of is not implemented")
    if req.suffix:
        raise _refuse("suffix", req.suffix, "insertion is not implemented")
    if req.stream_options is not None:
        raise _refuse("stream_options", req.stream_options, "answers arrive whole")
    if not req.max_tokens and not req.echo:
        raise OpenAIError(
            "max_tokens 0 asks for nothing unless echo is true.",
            param="max_tokens",
            code="invalid_value",
        )


def _legacy(entries: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Chat-style logprob entries as the legacy ``tokens`` / ``token_logprobs`` /
    ``top_logprobs`` (a dict token -> log probability) lists."""
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{a["token"]: a["logprob"] for a in e["top_logprobs"]} for e in entries],
    }


def _params(req: CompletionRequest, vocab: int) -> SamplingParams:
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return SamplingParams(
        max_tokens=req.max_tokens or 1,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        n=req.n or 1,
        stop=[s for s in stops if s],
        frequency_penalty=req.frequency_penalty or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        logit_bias=logit_bias_ids(req.logit_bias, vocab),
        logprobs=req.logprobs,
    )


async def _answers(
    state: WorkerState, req: CompletionRequest, ids: list[int], adapter: str | None
) -> tuple[list[dict[str, Any]], int]:
    """The ``n`` choices (without ``index``) for one prompt, and the tokens generated."""
    eng, tok = state.engine, state.engine.tokenizer
    head: list[dict[str, Any]] = []
    if req.echo and req.logprobs is not None:
        scored = await run_in_threadpool(eng.prompt_logprobs, ids, adapter, req.logprobs)
        head = [{"token": tok.decode([ids[0]]), "logprob": None, "top_logprobs": []}]
        head += scored
    n = req.n or 1
    texts, reasons, tails, used = [""] * n, ["length"] * n, [[] for _ in range(n)], 0
    if req.max_tokens:
        params = _params(req, len(tok))
        events = await run_in_threadpool(lambda: list(eng.stream(ids, adapter, params)))
        texts, reasons, tails, used = gather(events, n)
    prefix = tok.decode(ids) if req.echo else ""
    choices = [
        {
            "text": prefix + text,
            "finish_reason": reasons[i],
            "logprobs": None if req.logprobs is None else _legacy(head + tails[i]),
        }
        for i, text in enumerate(texts)
    ]
    return choices, used


async def complete_text(state: WorkerState, body: Any) -> Any:
    """Answer one ``/v1/completions`` request (one choice per prompt and ``n``).

    Raises:
        OpenAIError: 400 for a refusal listed in the module docstring, an unknown
            ``model`` or a prompt plus ``max_tokens`` beyond the context.
    """
    req = validate_body(CompletionRequest, body, "completions request", "none")
    _check(req)
    adapter = state.adapter_for(req.model)
    limit = state.engine.max_context
    prompts = _prompts(state, req)
    for ids in prompts:
        if len(ids) + (req.max_tokens or 0) > limit:
            raise OpenAIError(
                f"This endpoint's maximum context length is {limit} tokens; the prompt "
                f"uses {len(ids)} tokens and max_tokens asks for {req.max_tokens} more.",
                param="prompt",
                code="context_length_exceeded",
            )
    choices, used = [], 0
    for ids in prompts:
        found, n = await _answers(state, req, ids, adapter)
        choices += [{"index": len(choices) + i, **c} for i, c in enumerate(found)]
        used += n
    prompt_used = sum(len(ids) for ids in prompts)
    return JSONResponse(
        {
            "id": new_id("cmpl"),
            "object": "text_completion",
            "created": now(),
            "model": req.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_used,
                "completion_tokens": used,
                "total_tokens": prompt_used + used,
            },
        }
    )
