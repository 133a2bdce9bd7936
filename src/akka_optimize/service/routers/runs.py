"""Routes of the runs resource under ``/v1/training/runs``.

``POST /v1/training/runs`` takes a run descriptor. With ``?dryRun=true`` it answers the
dry-run report (resolved settings per group with stated values marked, the
configuration hash, pinned references, dataset findings) and creates nothing; without
it the plan is resolved and handed to :func:`akka_optimize.jobs.supervised.start_run`.
A refused plan is 400 with ``error.field`` the first refusal's full path and
``error.details`` every refusal ``{field, message, value, limit}`` (seeds/000 "Training
parameters"; DESIGN.md "Errors are sentences").
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...core.plans import dry_run, resolve_run_plan
from ...errors import InvalidRequest
from ...jsonvalues import loads
from ..connected import while_connected
from ..deps import CtxDep, PrincipalDep
from ..routing import JsonRoute
from ..schemas import DryRunReport, RunView, answers

router = APIRouter(route_class=JsonRoute)


async def read_json_body(request: Request) -> Any:
    """The request body decoded as JSON.

    Raises:
        InvalidRequest: (field ``body``) the body is empty or not JSON; the message gives
            the line and column.
    """
    body = await request.body()
    if not body.strip():
        raise InvalidRequest("The request body is empty; send a run plan as JSON.", field="body")
    return loads(body)


@router.post(
    "/v1/training/runs",
    **answers(
        DryRunReport,
        200,
        "What the run would be (dryRun=true); nothing is created.",
        also={201: (RunView, "The run, accepted.")},
    ),
)
async def start_run_route(
    request: Request, ctx: CtxDep, principal: PrincipalDep, dryRun: bool = False
) -> JSONResponse:
    """Start a run from a plan, or with ``dryRun=true`` report what it would run.

    A project token may start (and dry-run) runs of its own project only: 403
    ``optimize.training.projects.runs.start`` otherwise (:mod:`..access`).

    Rules of the plan that its schema cannot state, each refused with a 400 naming the
    field: ``baseModel`` is one the deployment's catalog allows, ``execution.deviceProfile``
    one the deployment declares and the host memory one its device has, and
    ``config.engineSettings`` the settings it allows; ``smoke``, ``config.loss`` and
    ``config.hyperparams`` are of supervised runs (``method: sft``; a reinforcement run reads
    ``config.rlHyperparams`` and a preference run ``config.dpoHyperparams``, which the other
    loops leave out), each ``lora.rank`` is at most the largest adapter rank the deployment's
    endpoints load, ``smokeCheck`` needs
    ``smoke: true`` and a smoke run takes no ``modelName``; ``validationBatchSize`` needs
    ``config.data.validationDataset``; ``tokensPerGpu`` is of runs on several devices, and
    on one device ``config.data.use_dynamic_bsz`` decides packing, not ``config.data.packing``; a
    ``modelName`` left out is derived from the base model's name, which must then be a name."""
    raw = await read_json_body(request)

    def work() -> dict[str, Any]:
        with ctx.db.session() as session:
            if dryRun:
                return dry_run(ctx, session, raw, principal)
            resolved = resolve_run_plan(ctx, session, raw, principal)
            from ...jobs.supervised import start_run  # lazy: guarded

            return start_run(ctx, session, resolved, principal)

    if dryRun:  # a dry run's findings read every row: stop them if the client leaves
        return JSONResponse(await while_connected(request, "dry run", work), status_code=200)
    return JSONResponse(await run_in_threadpool(work), status_code=201)
