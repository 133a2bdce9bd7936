"""The Tinker SDK's protocol under ``/api/v1/…`` (TINKER-PROTOCOL.md; tinker 0.38.0).

Every route reads the ``X-API-Key`` header: a ``tml-`` key from ``server token create
--tinker`` (:func:`akka_optimize.core.auth.authenticate`), acting in its project; an
admin key acts in the project the session names (``TINKER_PROJECT_ID``). Training calls
are queued for the client's worker and answered with futures
(:mod:`akka_optimize.tinker.broker`); ``retrieve_future`` long-polls them. Refusals are
4xx with the error shape, or a failed future ``{"error", "category": "user"}`` once a
``seq_id`` is taken (the SDK then raises ``RequestFailedError`` with the sentence). The
worker's own poll (``…/attempts/N/tinker/next``) lives in
:mod:`akka_optimize.service.routers.tinker.worker`.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ....catalog.selection.machine import list_base_models
from ....catalog.selection.rows import settings_catalog
from ....core.access.tinker import mine, tinker_int, tinker_model, tinker_project
from ....core.auth import Principal, authenticate
from ....core.tinker_clients import fail_if_run_ended, new_training_client
from ....errors import Forbidden, InvalidRequest, NotFound, Unauthorized
from ....tinker.broker import POLL_SECONDS, Model, Session, broker_of
from ....tinker.datums import non_finite, non_finite_config
from ....tinker.kind import ttl_refusal
from ....tinker.states import find_state, lora_request
from ....tinker.wire import (
    WireError,
    decode_forward_backward,
    encode_forward_backward_output,
    encode_sample_response,
)
from ...deps import CtxDep
from ...routing import JsonRoute

router = APIRouter(route_class=JsonRoute, prefix="/api/v1")
JsonBody = Annotated[dict[str, Any], Body()]


def tinker_principal(
    ctx: CtxDep, x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None
) -> Principal:
    """The caller of a protocol route, from its ``X-API-Key`` (checked like any token).

    Raises:
        Unauthorized: no key, or one the service does not know (the sentence names the
            ``X-API-Key`` header the SDK sends). Forbidden: a worker token.
    """
    if not x_api_key:
        raise Unauthorized(
            "This request has no X-API-Key header: pass api_key= (or TINKER_API_KEY) a key "
            "from `server token create --project P --tinker`.",
            field="X-API-Key",
        )
    try:
        p = authenticate(ctx, f"Bearer {x_api_key}")
    except Unauthorized as exc:  # the SDK sent X-API-Key, not a bearer token
        exc.message = exc.message.replace("The bearer token", "The X-API-Key")
        exc.field = "X-API-Key"
        raise
    if p.kind == "worker":
        raise Forbidden("A worker's token cannot use the Tinker API.", field="X-API-Key")
    return p


Caller = Annotated[Principal, Depends(tinker_principal)]


@router.post("/client/config")
async def client_config(_: Caller) -> dict[str, Any]:
    """The SDK's mandatory start-up call: plain API keys, plain httpx."""
    return {"pjwt_auth_enabled": False, "use_pyqwest_transport": False}


@router.post("/client/dynamic_config")
async def dynamic_config(_: Caller) -> dict[str, Any]:
    """Defaults for every dynamic setting."""
    return {}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness of the protocol's routes."""
    return {"status": "ok"}


@router.post("/telemetry")
async def telemetry(_: Caller) -> dict[str, str]:
    """SDK telemetry: accepted and discarded (nothing is stored or forwarded)."""
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
def capabilities(ctx: CtxDep, _: Caller) -> dict[str, Any]:
    """The catalog's selected, ``READY`` base models (trainable and sampleable)."""

    with ctx.db.session() as s:
        rows = list_base_models(s, settings_catalog(ctx.settings), all_entries=False)
    return {
        "supported_models": [
            {"model_name": r["repository"], "trainable": True, "sampleable": True}
            for r in rows
            if r["state"] == "READY"
        ]
    }


@router.post("/create_session")
def create_session(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """A client session (tags, metadata, project)."""
    tags, meta = body.get("tags") or [], body.get("user_metadata") or {}
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidRequest(f"tags is {tags!r:.60}; give a list of strings.", field="tags")
    if not isinstance(meta, dict):
        raise InvalidRequest(
            f"user_metadata is {meta!r:.60}; give an object.", field="user_metadata"
        )
    project = tinker_project(ctx, p, body.get("project_id"))
    sid = "sess-" + uuid.uuid4().hex[:12]
    broker_of(ctx).sessions[sid] = Session(sid, project, tags, meta)
    return {"type": "create_session", "session_id": sid}


@router.post("/session_heartbeat")
async def heartbeat(ctx: CtxDep, p: Caller, body: JsonBody) -> Any:
    """The SDK's beat (every 10 s): a session silent for ``service.tinkerHeartbeatSeconds``
    has its clients ended (:mod:`akka_optimize.service.routers.tinker.worker`). Another
    project's session is answered as an unknown one."""
    sess = broker_of(ctx).sessions.get(str(body.get("session_id")))
    if sess is None or not mine(p, sess.project):
        return JSONResponse({"detail": "This session is not known (finished)."}, status_code=410)
    sess.beat = time.monotonic()
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish(ctx: CtxDep, p: Caller, session_id: str) -> dict[str, Any]:
    """End the session's training clients after their queued calls (runs ``SUCCEEDED``).
    Another project's session is left as it is, answered as an unknown (finished) one."""
    b = broker_of(ctx)
    sess = b.sessions.get(session_id)
    if sess is not None and mine(p, sess.project):
        b.sessions.pop(session_id, None)
    for m in list(b.models.values()):
        if m.model_id.startswith(session_id + ":") and mine(p, m.project):
            m.queue.put_nowait({"request_id": "", "op": "end", "body": {}})
    return {}


@router.post("/create_model")
def create_model(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """A LoRA training client: a run in the session's project; the future resolves when its
    worker holds the session."""
    return new_training_client(ctx, p, body, body, None)


@router.post("/load_weights")
def load_weights(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """``create_training_client_from_state[_with_optimizer]``: a new client (run) that
    starts from a saved state (with its AdamW moments when ``optimizer``); or, with
    ``model_id``, ``load_state`` on an existing client, in its ``seq_id`` order."""

    path = str(body.get("path") or "")
    with ctx.db.session() as s:
        source, key = find_state(s, p.project, path)
        request = lora_request(source)
    load = {"key": key, "optimizer": bool(body.get("optimizer")), "path": path}
    if body.get("model_id"):
        m = tinker_model(ctx, p, str(body["model_id"]))
        fut = broker_of(ctx).submit(m, body.get("seq_id"), "load_weights", load)
        return _future(fut, m)
    return new_training_client(ctx, p, body, request, load)


@router.post("/get_info")
async def get_info(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """The client's base model, LoRA rank and tokenizer id: the folder of the base model's
    tokenizer in the service's weights cache, which ``TrainingClient.get_tokenizer()``
    loads with no hub when the client shares the service's filesystem (the README says
    how to use it elsewhere)."""
    m = tinker_model(ctx, p, str(body.get("model_id")))
    tok = m.info["tokenizer"]
    return {
        "type": "get_info",
        "model_id": m.model_id,
        "model_data": {"arch": "llama", "model_name": m.base_model, "tokenizer_id": tok},
        "is_lora": True,
        "lora_rank": m.rank,
        "model_name": m.base_model,
    }


def _future(fut: Any, m: Model) -> dict[str, Any]:
    return {"request_id": fut.request_id, "model_id": m.model_id}


@router.post("/forward_backward")
async def forward_backward(ctx: CtxDep, p: Caller, request: Request) -> dict[str, Any]:
    """``forward_backward`` and ``forward`` (protobuf ``ForwardBackwardRequest``)."""
    raw = await request.body()
    if request.headers.get("content-encoding") == "zstd":
        raise InvalidRequest("zstd bodies are not accepted.", field="Content-Encoding")
    try:
        req = decode_forward_backward(raw)
    except WireError as exc:
        raise InvalidRequest(str(exc), field="body") from exc
    m = tinker_model(ctx, p, req["model_id"])
    # JSON cannot carry NaN to the worker: the call fails in its seq_id order, named
    req["refused"] = non_finite(req["data"]) or non_finite_config(req["loss_fn_config"])
    if req["refused"]:
        req["loss_fn_config"] = {}
    fut = broker_of(ctx).submit(m, req["seq_id"], "forward_backward", req)
    return _future(fut, m)


@router.post("/optim_step")
async def optim_step(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """One AdamW update with the accumulated gradient as it is (``adam_params``)."""
    m = tinker_model(ctx, p, str(body.get("model_id")))
    if body.get("optimizer_params"):
        raise InvalidRequest(
            "optimizer_params: the platform trains with AdamW only; pass AdamParams.",
            field="optimizer_params",
        )
    fut = broker_of(ctx).submit(m, body.get("seq_id"), "optim_step", body)
    return _future(fut, m)


def _checkpoint_name(body: dict[str, Any]) -> str:
    name = str(body.get("path") or "")
    if not name or "/" in name or len(name) > 128:
        raise InvalidRequest(
            f"path {name!r}: give a checkpoint name of 1 to 128 characters without '/'.",
            field="path",
        )
    return name


@router.post("/save_weights")
async def save_weights(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """``save_state``: the full training state (adapter, AdamW moments, step)."""
    m = tinker_model(ctx, p, str(body.get("model_id")))
    body["name"], body["refused"] = _checkpoint_name(body), ttl_refusal(body.get("ttl_seconds"))
    return _future(broker_of(ctx).submit(m, body.get("seq_id"), "save_weights", body), m)


@router.post("/save_weights_external")
async def save_weights_external(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """``save_weights_external(name)``: the adapter as a PEFT folder, a checkpoint
    ``tinker://MODEL_ID/external_weights/NAME`` whose files ``external_weights_urls`` signs
    (``tinker checkpoint download``). age encryption is refused in seq_id order."""
    m = tinker_model(ctx, p, str(body.get("model_id")))
    body["name"], body["refused"] = _checkpoint_name(body), ttl_refusal(body.get("ttl_seconds"))
    if body.get("age_encryption_recipients"):
        body["refused"] = (
            "age_encryption_recipients: the platform exports unencrypted files only; leave "
            "it unset (the files stay on this platform's own blob store)."
        )
    return _future(broker_of(ctx).submit(m, body.get("seq_id"), "save_weights_external", body), m)


@router.post("/save_weights_for_sampler")
async def save_for_sampler(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """``save_weights_for_sampler(name)``: the adapter becomes a model version
    ``PROJECT/NAME:vN`` of the client's run."""
    m = tinker_model(ctx, p, str(body.get("model_id")))
    if body.get("path"):  # a bad TTL fails in seq_id order (a 400 would leave a gap)
        body["name"], body["refused"] = _checkpoint_name(body), ttl_refusal(body.get("ttl_seconds"))
        op = "save_weights_for_sampler"
    else:  # save_weights_and_get_sampling_client: a snapshot of the session's weights
        k = tinker_int(body, "sampling_session_seq_id", 0)
        body["sampling_session_id"] = f"{m.model_id.split(':')[0]}:sample:{k}"
        op = "sampler_snapshot"
    return _future(broker_of(ctx).submit(m, body.get("seq_id"), op, body), m)


@router.post("/asample")
async def asample(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """``SamplingClient.sample`` on a snapshot a training client took or on a sampling
    client's own worker; the future carries one ``sample_sequence_ids`` entry per sample."""
    b = broker_of(ctx)
    sid = str(body.get("sampling_session_id"))
    model_id, step = b.samplers.get(sid, ("", 0))
    m = b.model_of(model_id)
    if m is None or not mine(p, m.project):  # another project's reads as a missing one
        raise InvalidRequest(
            f"sampling_session_id {sid!r}: no such sampling client for this key.",
            field="sampling_session_id",
        )
    n = tinker_int(body, "num_samples", 1)
    if not 1 <= n <= 256:
        raise InvalidRequest(f"num_samples is {n}; give 1 to 256.", field="num_samples")
    fut = b.submit(m, None, "sample", {**body, "snapshot_step": step})
    ids = [f"{fut.request_id}:{i}" for i in range(n)]
    return {"request_id": fut.request_id, "sample_sequence_ids": ids}


@router.post("/retrieve_future")
async def retrieve_future(ctx: CtxDep, p: Caller, body: JsonBody) -> Any:
    """Long-polls a future: its result (protobuf for ``forward_backward``), a failed future's
    ``{"error", "category"}``, or 408 ``try_again`` after about 25 s. Another project's
    future is answered as a missing one."""
    b = broker_of(ctx)
    fut = b.futures.get(str(body.get("request_id")))
    if fut is None or not mine(p, fut.project):
        raise NotFound(
            f"request_id {body.get('request_id')!r}: no such future.", field="request_id"
        )
    waited = 0.0
    while not fut.done.is_set() and waited < POLL_SECONDS:
        if await b.wait(fut, 2.0):
            break
        waited += 2.0
        await run_in_threadpool(fail_if_run_ended, ctx, b, fut.model_id)
    if not fut.done.is_set():
        return JSONResponse(
            {"type": "try_again", "request_id": fut.request_id, "queue_state": "active"},
            status_code=408,
        )
    if fut.error is not None:
        return {"error": fut.error, "category": fut.category}
    result = fut.result or {}
    if fut.type == "sample":
        data = encode_sample_response(result["sequences"], result.get("prompt_logprobs"))
        return Response(data, media_type="application/x-protobuf")
    if fut.type == "forward_backward":
        data = encode_forward_backward_output({"logprobs": result["logprobs"]}, result["metrics"])
        return Response(data, media_type="application/x-protobuf")
    return result
