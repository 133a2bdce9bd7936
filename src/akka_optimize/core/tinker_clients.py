"""Tinker training clients (TINKER-PROTOCOL.md ``create_model``, ``load_weights``): the
run a new client trains in, its model in the session's broker, failing a client's futures
once its run has ended, and what its worker's answers become (saves recorded, sampler
weights registered; the run's pending control). The protocol's routes and the worker's
poll (:mod:`akka_optimize.service.routers.tinker.worker`) call them.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..catalog.cache import tokenizer_dir
from ..db.models.jobs import Run
from ..errors import AkkaError, InvalidRequest
from ..jobs import states as S
from ..tinker.broker import Broker, Model, Session, broker_of
from ..tinker.kind import (
    HEARTBEAT_SECONDS,
    create_training_run,
    record_checkpoint,
    register_sampler_weights,
)
from .access.tinker import session, tinker_int
from .auth import Principal
from .context import ServiceContext


def client_model_name(sess: Session, body: dict[str, Any], run_id: str) -> str:
    """The model name a client's run registers under: the session's ``model:NAME`` tag,
    else ``user_metadata.model_name``, else ``tinker-`` and the run ID's first 8 characters."""
    meta = body.get("user_metadata") or {}
    for tag in sess.tags:
        if tag.startswith("model:"):
            return tag.removeprefix("model:")
    return str(meta.get("model_name") or f"tinker-{run_id[:8]}")


def new_training_client(
    ctx: ServiceContext,
    p: Principal,
    body: dict[str, Any],
    request: dict[str, Any],
    load: dict | None,
) -> dict[str, Any]:
    """A new LoRA training client of session ``body["session_id"]``: a run in the session's
    project (trained as ``request`` says: base model, rank), and its model in the broker,
    whose ``create_model`` (``load`` None) or ``load_weights`` future resolves once the run's
    worker holds the session. Returns ``{"request_id", "model_id"}``.

    A refusal of the run (an unknown base model, a rank past the deployment's) is a failed
    future, not an error: the SDK retries a 4xx on these routes for minutes.

    Raises:
        InvalidRequest: (``model_seq_id``) the session has a model of that number already.
        NotFound: (``session_id``) no such session for this key.
    """
    b = broker_of(ctx)
    sess = session(b, p, str(body.get("session_id")))
    model_id = f"{sess.session_id}:train:{tinker_int(body, 'model_seq_id', 0)}"
    if model_id in b.models:
        raise InvalidRequest(f"model {model_id} exists already.", field="model_seq_id")
    fut = b.new_future(model_id, "create_model" if load is None else "load_weights", sess.project)
    try:  # a refusal is a failed future: a 409 here would be retried for minutes
        with ctx.db.session() as s:
            name = client_model_name(sess, request, uuid.uuid4().hex[:16])
            run = create_training_run(ctx, s, sess.project, request, name, load)
            run.results = {"tinkerModelId": model_id}
            run_id, base, rank = run.id, run.base_model, run.resolved["lora"]["rank"]
            tokenizer = str(tokenizer_dir(s, ctx.settings, base))
    except AkkaError as exc:
        b.resolve(fut.request_id, None, exc.message)
        return {"request_id": fut.request_id, "model_id": model_id}
    model = Model(model_id, run_id, sess.project, base, rank, {"tokenizer": tokenizer})
    model.info["create_future"] = fut.request_id
    model.info["ready"] = (
        {"type": "create_model", "model_id": model_id}
        if load is None
        else {"type": "load_weights", "model_id": model_id, "path": load["path"]}
    )
    b.models[model_id] = model
    b.by_run[run_id] = model_id
    return {"request_id": fut.request_id, "model_id": model_id}


def fail_if_run_ended(ctx: ServiceContext, b: Broker, model_id: str) -> None:
    """Fail model ``model_id``'s pending futures when its run has ended (its worker is
    gone), with the run's failure reason; nothing for an unknown model or a live run."""

    m = b.model_of(model_id)
    if m is None:
        return
    with ctx.db.session() as s:
        run = s.get(Run, m.run_id)
        if run is not None and run.state in S.TERMINAL:
            reason = run.failure_reason or f"the training client's run ended ({run.state})"
            b.fail_model(model_id, f"Run {run.id}: {reason}")


def worker_answer_result(
    ctx: ServiceContext, m: Model, item_op: str, answer: dict[str, Any]
) -> dict | None:
    """The result a training client's future resolves with, from its worker's ``answer``
    to an item of op ``item_op``: a saved state or export is recorded as the run's
    checkpoint and answered with its ``tinker://`` path; saved sampler weights are also
    registered as a model version (``model_version``) and remembered for sampling. Other
    results pass through as they are.

    Raises:
        Exception: the registration failed (the caller fails the future with the sentence).
    """

    result = answer.get("result")
    if result is not None and item_op == "sampler_snapshot":
        sid = answer["sampling_session_id"]
        broker_of(ctx).samplers[sid] = (m.model_id, int(result["step"]))
        return {"type": "save_weights_for_sampler", "sampling_session_id": sid}
    saves = ("save_weights", "save_weights_for_sampler", "save_weights_external")
    if result is None or item_op not in saves:
        return result

    name, ttl = answer["name"], answer.get("ttl")
    with ctx.db.session() as s:
        run = s.get(Run, m.run_id)
        assert run is not None
        if item_op != "save_weights_for_sampler":  # a state, or an external export
            kind = "weights" if item_op == "save_weights" else "external_weights"
            saved = dict((run.results or {}).get("tinkerSaves") or {})
            saved[f"{kind}/{name}"] = result["key"]
            run.results = {**(run.results or {}), "tinkerSaves": saved}
            record_checkpoint(run, f"{kind}/{name}", result["key"], result.get("bytes"), ttl)
            return {"type": item_op, "path": f"tinker://{m.model_id}/{kind}/{name}"}
        pinned = register_sampler_weights(ctx, s, run, name, result["key"], result["step"])
        record_checkpoint(run, f"sampler_weights/{name}", result["key"], result.get("bytes"), ttl)
    return {
        "type": "save_weights_for_sampler",
        "path": f"tinker://{m.model_id}/sampler_weights/{name}",
        "model_version": pinned,
    }


def run_marks(ctx: ServiceContext, run_id: str) -> tuple[str | None, float]:
    """The run's pending control (``cancel``, …, or None) and its heartbeat bound in
    seconds (the run's ``heartbeatSeconds``, else the default)."""

    with ctx.db.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            return None, float(HEARTBEAT_SECONDS)
        bound = (run.resolved or {}).get("heartbeatSeconds", HEARTBEAT_SECONDS)
        return run.control, float(bound)
