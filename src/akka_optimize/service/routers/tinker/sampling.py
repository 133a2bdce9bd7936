"""The Tinker SDK's sampling-client routes: ``POST /api/v1/create_sampling_session``
(``ServiceClient.create_sampling_client(model_path=… | base_model=…)``) and ``GET
/api/v1/samplers/{id}`` (a sampler's base model; TINKER-PROTOCOL.md §4.1 rows 17–18).

A sampling client is a run whose worker holds the weights
(:mod:`akka_optimize.tinker.samplers`); this module only records it with the broker, so
``asample`` (:mod:`akka_optimize.service.routers.tinker.protocol`) queues its calls for that worker.
``create_sampling_session`` answers at once (no future): a refusal is a 4xx whose
sentence names the field, which the SDK raises as ``tinker.BadRequestError`` /
``tinker.NotFoundError``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ....core.access.tinker import session, tinker_int
from ....errors import AkkaError, InvalidRequest, NotFound
from ....tinker.broker import Model, broker_of
from ....tinker.samplers import create_sampling_run
from ...deps import CtxDep
from ...routing import JsonRoute
from .protocol import Caller, JsonBody

router = APIRouter(route_class=JsonRoute, prefix="/api/v1")


@router.post("/create_sampling_session")
def create_sampling_session(ctx: CtxDep, p: Caller, body: JsonBody) -> dict[str, Any]:
    """A sampling client of a saved ``model_path`` (``tinker://…/sampler_weights/NAME``) or
    of ``base_model`` alone; its id is ``SESSION:sample:K`` (``sampling_session_seq_id``).

    Raises:
        InvalidRequest / NotFound / Conflict: an unknown session, a seq id already used,
            a path that is not a saved sampler checkpoint of the project (``model_path``),
            a base model not selected and ``READY`` (``base_model``).
    """

    b = broker_of(ctx)
    sess = session(b, p, str(body.get("session_id")))
    k = tinker_int(body, "sampling_session_seq_id", 0)
    sid = f"{sess.session_id}:sample:{k}"
    if sid in b.samplers or sid in b.models:
        raise InvalidRequest(
            f"sampling_session_seq_id {k}: this session has a sampling client {sid} already.",
            field="sampling_session_seq_id",
        )
    path, base = body.get("model_path"), body.get("base_model")
    try:
        with ctx.db.session() as s:
            run = create_sampling_run(ctx, s, sess.project, path, base)
            run.results = {"tinkerModelId": sid}
            run_id, base_model, rank = run.id, run.base_model, run.resolved["lora"]["rank"]
    except AkkaError as exc:  # the SDK retries a 409 for minutes: a refusal is final here
        if exc.status == 409:
            exc.status = 400
        raise
    model = Model(sid, run_id, sess.project, base_model, rank, {}, sampler=path or base_model)
    model.info["create_future"] = b.new_future(
        sid, "create_sampling_session", sess.project
    ).request_id
    model.info["ready"] = {"type": "create_sampling_session", "sampling_session_id": sid}
    b.models[sid] = model
    b.by_run[run_id] = sid
    b.samplers[sid] = (sid, 0)  # its worker never trains: its weights stay step 0's
    return {"type": "create_sampling_session", "sampling_session_id": sid}


@router.get("/samplers/{sampler_id}")
async def get_sampler(ctx: CtxDep, p: Caller, sampler_id: str) -> dict[str, Any]:
    """``{"sampler_id", "base_model", "model_path"}`` of a live sampling client (``model_path``
    null for a base-model client or a training client's snapshot).

    Raises:
        NotFound: no such sampling client for this key (field ``sampler_id``).
    """
    b = broker_of(ctx)
    owner = b.model_of(b.samplers.get(sampler_id, ("", 0))[0])
    if owner is None or (p.project and owner.project != p.project):
        raise NotFound(
            f"sampler_id {sampler_id!r}: no such sampling client for this key.",
            field="sampler_id",
        )
    path = owner.sampler if owner.sampler and owner.sampler.startswith("tinker://") else None
    return {"sampler_id": sampler_id, "base_model": owner.base_model, "model_path": path}
