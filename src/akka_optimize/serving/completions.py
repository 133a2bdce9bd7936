"""``POST /v1/chat/completions`` on a worker: validation, generation, parsing, SSE.

Bad requests are refused before any token is generated with an OpenAI-style 400:
an unknown ``model``, malformed messages, ``max_tokens`` below 1, a prompt plus
``max_tokens`` longer than the endpoint's context (``context_length_exceeded``),
or tools offered to an architecture without a parser.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..testhooks import hold
from .chat import render_prompt
from .engine import SamplingParams, StepEvent
from .parsers import StreamSplitter, markup_for, parse_generated, parsers_for
from .schema import ChatRequest, OpenAIError, new_id, now, parse_chat_request
from .worker_state import WorkerState

#: ``max_tokens`` when a request names none (capped by the context left).
DEFAULT_MAX_TOKENS = 1024


def prepare(
    state: WorkerState, body: Any
) -> tuple[ChatRequest, str | None, list[int], SamplingParams]:
    """Validate ``body`` and build the prompt and sampling parameters.

    Returns:
        (request, adapter name or None for the base model, prompt ids, params).

    Raises:
        OpenAIError: 400 for any refusal listed in the module docstring.
    """
    req = parse_chat_request(body)
    adapter = state.adapter_for(req.model)
    eng = state.engine
    ids = render_prompt(
        eng.tokenizer,
        req,
        architecture=eng.architecture,
        instructions=state.instructions.get(req.model),
    )
    room = eng.max_context - len(ids)
    asked = req.max_completion_tokens or req.max_tokens
    field = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    if room < 1 or (asked is not None and asked > room):
        raise OpenAIError(
            f"This endpoint's maximum context length is {eng.max_context} tokens; the "
            f"messages use {len(ids)} tokens and {field} asks for "
            f"{asked if asked is not None else 'at least 1'} more. Shorten the messages "
            f"or lower {field}.",
            param="messages",
            code="context_length_exceeded",
        )
    params = SamplingParams(
        max_tokens=asked or min(DEFAULT_MAX_TOKENS, room),
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        n=req.n or 1,
        stop=req.stop_strings(),
        choice=req.guided_choice,
        frequency_penalty=req.frequency_penalty or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        logit_bias=logit_bias_ids(req.logit_bias, len(eng.tokenizer)),
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
    )
    return req, adapter, ids, params


def logit_bias_ids(bias: dict[str, float] | None, vocab: int) -> dict[int, float] | None:
    """A request's ``logit_bias`` with its keys as token ids (None when empty).

    Raises:
        OpenAIError: 400 naming ``logit_bias`` when a key is not a token id below ``vocab``.
    """
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()) or int(key) >= vocab:
            raise OpenAIError(
                f"logit_bias maps token ids to biases; {key!r} is not a token id of this "
                f"model (0 to {vocab - 1}).",
                param="logit_bias",
                code="invalid_value",
            )
        out[int(key)] = float(value)
    return out


def _tools_on(req: ChatRequest) -> bool:
    return bool(req.tools) and req.tool_choice != "none"


def gather(
    events: list[StepEvent], n: int
) -> tuple[list[str], list[str], list[list[dict[str, Any]]], int]:
    """The ``n`` answers' texts, finish reasons and logprob entries from their step
    events, and the tokens generated in all."""
    texts, reasons = [""] * n, ["stop"] * n
    logprobs: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    used = 0
    for ev in events:
        texts[ev.index] += ev.delta
        logprobs[ev.index] += ev.logprobs
        if ev.finish_reason:
            reasons[ev.index] = ev.finish_reason
            used += ev.n_tokens
    return texts, reasons, logprobs, used


async def complete(state: WorkerState, body: Any) -> Any:
    """Answer one chat request (a JSON response, or an SSE stream when ``stream``)."""
    req, adapter, ids, params = prepare(state, body)
    spec = parsers_for(state.engine.architecture)
    tools = _tools_on(req) and spec.tool_calls is not None
    reasoning = spec.reasoning is not None
    if req.stream:
        return StreamingResponse(
            _sse(state, req, adapter, ids, params, tools, reasoning),
            media_type="text/event-stream",
        )

    def generate() -> list[StepEvent]:
        hold("answer")  # tests only: an answer that lasts until the test releases it
        return list(state.engine.stream(ids, adapter, params))

    texts, reasons, logprobs, used = gather(await run_in_threadpool(generate), params.n)
    choices = []
    for i, text in enumerate(texts):
        p = parse_generated(
            text, tools=tools, reasoning=reasoning, markup=markup_for(state.engine.architecture)
        )
        msg: dict[str, Any] = {"role": "assistant", "content": p.content}
        if p.reasoning is not None:
            msg["reasoning_content"] = p.reasoning
        if p.tool_calls:
            msg["tool_calls"] = p.tool_calls
            msg["content"] = p.content or None
        reason = "tool_calls" if p.tool_calls else reasons[i]
        lp = {"content": logprobs[i], "refusal": None} if params.logprobs is not None else None
        choices.append({"index": i, "message": msg, "finish_reason": reason, "logprobs": lp})
    return JSONResponse(
        {
            "id": new_id(),
            "object": "chat.completion",
            "created": now(),
            "model": req.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": used,
                "total_tokens": len(ids) + used,
            },
        }
    )


def _chunk(
    cid: str,
    model: str,
    index: int,
    delta: dict[str, Any],
    reason: str | None,
    logprobs: list[dict[str, Any]] | None = None,
) -> str:
    """One ``chat.completion.chunk`` SSE line; ``logprobs`` (None: not asked) are the
    entries of the tokens this chunk brings."""
    lp = None if logprobs is None else {"content": logprobs, "refusal": None}
    choice = {"index": index, "delta": delta, "finish_reason": reason, "logprobs": lp}
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": now(),
        "model": model,
        "choices": [choice],
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _run_in_thread(
    state: WorkerState, adapter: str | None, ids: list[int], params: SamplingParams
) -> tuple[asyncio.Queue, threading.Event]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()

    def produce() -> None:
        gen = state.engine.stream(ids, adapter, params)
        try:
            for ev in gen:
                loop.call_soon_threadsafe(queue.put_nowait, ev)
                if cancel.is_set():
                    break
        except Exception as exc:  # delivered to the stream as an error event
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            gen.close()
            loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=produce, daemon=True, name="generate").start()
    return queue, cancel


async def _sse(
    state: WorkerState,
    req: ChatRequest,
    adapter: str | None,
    ids: list[int],
    params: SamplingParams,
    tools: bool,
    reasoning: bool,
) -> AsyncIterator[str]:
    cid = new_id()
    markup = markup_for(state.engine.architecture)
    splitters = [
        StreamSplitter(tools=tools, reasoning=reasoning, markup=markup) for _ in range(params.n)
    ]
    calls = [0] * params.n
    asked = params.logprobs is not None
    pending: list[list[dict[str, Any]]] = [[] for _ in range(params.n)]  # logprobs unsent
    used = 0
    for i in range(params.n):
        yield _chunk(cid, req.model, i, {"role": "assistant", "content": ""}, None)
    queue, cancel = _run_in_thread(state, adapter, ids, params)
    try:
        while True:
            ev = await queue.get()
            if ev is None:
                break
            if isinstance(ev, Exception):
                err = {"message": f"The endpoint failed: {ev}", "type": "server_error"}
                yield f"data: {json.dumps({'error': err})}\n\n"
                return
            assert isinstance(ev, StepEvent)
            sp = splitters[ev.index]
            pending[ev.index] += ev.logprobs
            events = sp.feed(ev.delta) + (sp.finish() if ev.finish_reason else [])
            for kind, value in events:  # a token's logprobs ride on the next chunk sent
                lp, pending[ev.index] = (pending[ev.index] if asked else None), []
                yield _delta_chunk(cid, req.model, ev.index, kind, value, calls, lp)
            if ev.finish_reason:
                used += ev.n_tokens
                reason = "tool_calls" if calls[ev.index] else ev.finish_reason
                lp, pending[ev.index] = (pending[ev.index] if asked else None), []
                yield _chunk(cid, req.model, ev.index, {}, reason, lp)
        if req.stream_options and req.stream_options.include_usage:
            usage = {
                "prompt_tokens": len(ids),
                "completion_tokens": used,
                "total_tokens": len(ids) + used,
            }
            body = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": now(),
                "model": req.model,
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(body)}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        cancel.set()


def _delta_chunk(
    cid: str,
    model: str,
    index: int,
    kind: str,
    value: Any,
    calls: list[int],
    logprobs: list[dict[str, Any]] | None,
) -> str:
    if kind == "content":
        return _chunk(cid, model, index, {"content": value}, None, logprobs)
    if kind == "reasoning":
        return _chunk(cid, model, index, {"reasoning_content": value}, None, logprobs)
    call = {"index": calls[index], **value}
    calls[index] += 1
    return _chunk(cid, model, index, {"tool_calls": [call]}, None, logprobs)
