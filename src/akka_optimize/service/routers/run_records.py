"""Run records: read, metrics, snapshots, failure, control, and worker events.

``POST /v1/training/runs`` (start and dry run) lives in :mod:`.runs`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query
from starlette.concurrency import run_in_threadpool

from ...core.access import rules as access
from ...core.attempts import check_running_attempt
from ...core.endpoints.judges import ensure_judge_endpoint
from ...core.inputs import check_worker_event, whole_number
from ...core.snapshot_registration import register_snapshot_adapter
from ...core.sweep_body import start_sweep
from ...errors import NotFound
from ...jobs import branches, compare, control, events, records, views
from ...jsonvalues import MAX_INT
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import (
    ChatCompletion,
    EndpointView,
    LossComparison,
    RunAncestry,
    RunFailure,
    RunList,
    RunMetrics,
    RunSamples,
    RunView,
    SnapshotList,
    SnapshotRegistration,
    SnapshotView,
    SweepAnswer,
    TreeNode,
    WorkerEventAnswer,
    answers,
)
from .endpoints.judges import judge_chat

router = APIRouter(route_class=JsonRoute, prefix="/v1/training")


@router.get("/runs", **answers(RunList))
def list_runs(
    session: SessionDep,
    principal: PrincipalDep,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest runs first, of the projects the caller sees."""
    visible, project = access.list_scope(principal, project)
    return {"runs": views.list_runs(session, project, limit) if visible else []}


@router.get("/runs/{run_id}", **answers(RunView))
def get_run(
    run_id: str, session: SessionDep, principal: PrincipalDep, settings: bool = False
) -> dict[str, Any]:
    """A run's state, results and cost; ``settings=true`` adds its frozen settings."""
    return views.run_view(session, access.find_run(principal, session, run_id), settings=settings)


@router.get("/runs/{run_id}/samples", **answers(RunSamples))
def run_samples(
    run_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    step: Annotated[int | None, Query(ge=1, le=MAX_INT, description="One update only.")] = None,
) -> dict[str, Any]:
    """A reinforcement run's samples per update: prompt, completion, reward, advantage."""
    return views.samples(session, access.find_run(principal, session, run_id), step)


@router.get("/runs/{run_id}/metrics", **answers(RunMetrics))
def run_metrics(run_id: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Per-update metrics and validation measurements."""
    return views.metrics(session, access.find_run(principal, session, run_id))


@router.get("/runs/{run_id}/snapshots", **answers(SnapshotList))
def run_snapshots(run_id: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """The run's saves with their sizes."""
    run = access.find_run(principal, session, run_id)
    return {"run": run.id, "snapshots": views.snapshots(session, run)}


@router.get("/runs/{run_id}/compare", **answers(LossComparison))
def compare_runs(
    run_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    baseline: Annotated[str, Query(description="The baseline run's id.")],
    window: Annotated[int, Query(description="Updates per window.")] = compare.DEFAULT_WINDOW,
    margin: Annotated[
        float, Query(description="Largest mean loss difference a window may show.")
    ] = compare.DEFAULT_MARGIN,
    spikeFactor: Annotated[  # noqa: N803 (the API's camelCase)
        float, Query(description="Gradient-norm multiple of the window median that spikes.")
    ] = compare.DEFAULT_SPIKE_FACTOR,
) -> dict[str, Any]:
    """The run's training loss against a baseline run of the same configuration."""
    run = access.find_run(principal, session, run_id)
    base = access.find_run(principal, session, baseline)
    access.check_compare(run, base)
    return compare.compare_runs(
        session,
        run,
        base,
        window=window,
        margin=margin,
        spike_factor=spikeFactor,
    )


@router.post("/runs/{run_id}/sweep", status_code=201, **answers(SweepAnswer, 201))
def sweep_run(
    run_id: str,
    ctx: CtxDep,
    session: SessionDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body()],
) -> dict[str, Any]:
    """One branch per grid point from one snapshot of the run (``snapshot``, ``steps``,
    ``grid``, optional ``dataset``); with ``compare`` (and ``dataset``), also the comparison
    of the source snapshot against every branch, queued until they have all ended, graded
    by ``grader`` (``graderInstructions``, ``sampling``) or the project's evaluation
    settings. Nothing is created when any point, or the comparison, is refused."""

    return start_sweep(ctx, session, principal, run_id, body)


@router.get("/runs/{run_id}/tree", **answers(TreeNode))
def run_tree(run_id: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every generation of branches below the run."""
    return branches.tree(session, access.find_run(principal, session, run_id))


@router.get("/runs/{run_id}/ancestry", **answers(RunAncestry))
def run_ancestry(run_id: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """The run, then each run it branched from, back to the lineage's root."""
    lineage = branches.ancestry(session, access.find_run(principal, session, run_id))
    return {"run": lineage[0]["run"], "root": lineage[-1]["run"], "ancestry": lineage}


@router.get("/runs/{run_id}/snapshots/{name}", **answers(SnapshotView))
def get_snapshot(
    run_id: str, name: str, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    """One save, named ``step-N`` or ``N``."""
    run = access.find_run(principal, session, run_id)
    step = name.removeprefix("step-")
    snaps = views.snapshots(session, run)
    for snap in snaps:
        if str(snap["step"]) == step:
            return snap
    have = ", ".join(s["name"] for s in snaps) or "none yet"
    raise NotFound(
        f"Run {run.id} has no snapshot {name!r}; its snapshots: {have}.", field="snapshot"
    )


@router.post(
    "/runs/{run_id}/snapshots/{name}/register",
    status_code=201,
    response_model=SnapshotRegistration,
)
def register_snapshot(
    run_id: str,
    name: str,
    ctx: CtxDep,
    session: SessionDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any] | None, Body()] = None,
) -> dict[str, Any]:
    """Register a kept snapshot's adapter as a model version, while the run trains or
    after (seeds/001 "Other changes"; F050): ``{"modelName"?}`` (the run's model name by
    default, in the run's project). The registration happens in the request: the answer
    has ``registrationId`` (``RUN@step-N:NAME``), ``state`` ``REGISTERED`` and ``model``,
    the pinned version. Registering the same snapshot under the same name again answers
    the same version.

    Raises:
        NotFound: no such run or snapshot. Conflict: the snapshot kept no adapter
            (``execution.keepAdapters``), or the registry refuses the name (F049).
    """

    return register_snapshot_adapter(ctx, session, principal, run_id, name, body or {})


@router.get("/runs/{run_id}/failure", response_model=RunFailure)
def run_failure(run_id: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Why a run failed: one sentence; the worker's output stays with operators."""
    run = access.find_run(principal, session, run_id)
    return {
        "run": run.id,
        "state": run.state,
        "reason": run.failure_reason,
        "hasOperatorDetail": bool(run.failure_detail),
    }


@router.post("/runs/{run_id}/cancel", **answers(RunView))
def cancel_run(
    run_id: str, ctx: CtxDep, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    return control.request_control(
        ctx, session, access.find_run(principal, session, run_id), "cancel"
    )


@router.post("/runs/{run_id}/pause", **answers(RunView))
def pause_run(
    run_id: str, ctx: CtxDep, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    return control.request_control(
        ctx, session, access.find_run(principal, session, run_id), "pause"
    )


@router.post("/runs/{run_id}/resume", **answers(RunView))
def resume_run(
    run_id: str,
    ctx: CtxDep,
    session: SessionDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any] | None, Body()] = None,
) -> dict[str, Any]:
    """Resume a paused or failed run from its newest kept save or ``{"step": N}``."""
    step = (body or {}).get("step")
    checked = whole_number(step, "step") if step is not None else None
    return control.resume(ctx, session, access.find_run(principal, session, run_id), checked)


@router.post("/runs/{run_id}/attempts/{number}/events", response_model=WorkerEventAnswer)
def worker_event(
    run_id: str,
    number: Annotated[int, Path(ge=1, le=MAX_INT, description="The attempt number.")],
    ctx: CtxDep,
    session: SessionDep,
    event: Annotated[dict[str, Any], Body()],
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """A worker's event (token of that attempt only)."""
    att = events.authorize_attempt(session, run_id, number, _token(authorization))
    run = records.get_run(session, run_id)
    return events.handle_event(ctx, session, run, att, check_worker_event(event))


def _token(authorization: str | None) -> str:
    """The bearer token of an ``Authorization`` header (empty when none)."""
    return (authorization or "")[7:].strip()


@router.post("/runs/{run_id}/attempts/{number}/judge", **answers(EndpointView))
def judge_endpoint(
    run_id: str,
    number: Annotated[int, Path(ge=1, le=MAX_INT, description="The attempt number.")],
    ctx: CtxDep,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """An evaluation worker's ``model:`` judge endpoint (token of that attempt only):
    created in the evaluation's project when none serves the judge, and started."""
    check_running_attempt(ctx, run_id, number, _token(authorization))
    return ensure_judge_endpoint(ctx, run_id)


@router.post(
    "/runs/{run_id}/attempts/{number}/judge/chat/completions",
    **answers(ChatCompletion, 200, "The judge's chat completion (OpenAI's shape)."),
)
async def judge_chat_completions(
    run_id: str,
    number: Annotated[int, Path(ge=1, le=MAX_INT, description="The attempt number.")],
    ctx: CtxDep,
    body: Annotated[dict[str, Any], Body()],
    authorization: Annotated[str | None, Header()] = None,
) -> Any:
    """One chat completion of an evaluation worker's judge (token of that attempt only),
    forwarded to the judge's endpoint (OpenAI's request and answer shapes)."""
    await run_in_threadpool(check_running_attempt, ctx, run_id, number, _token(authorization))
    return await judge_chat(ctx, run_id, body)
