"""The body of ``POST /v1/training/runs/RUN/sweep``
(:mod:`akka_optimize.service.routers.run_records`): the fields it takes, what the
comparison of a sweep's branches scores with, and the sweep it starts."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.projects import Project
from ..errors import InvalidRequest
from ..jobs import branches, sweeps
from ..plan.pipeline import Sampling
from .access import rules as access
from .auth import Principal
from .context import ServiceContext
from .inputs import whole_number
from .plans import resolve_run_plan

SWEEP_FIELDS = frozenset(
    {"snapshot", "steps", "grid", "dataset", "compare", "grader", "graderInstructions", "sampling"}
)
"""The fields of ``POST /v1/training/runs/RUN/sweep``."""


def sweep_scoring(session: Any, source: Any, body: dict[str, Any]) -> dict[str, Any]:
    """What a sweep's comparison scores with: ``dataset`` (required), ``grader`` (else the
    project's evaluation settings' grader and instructions), ``sampling`` (the settings',
    then the body's, over the defaults).

    Raises:
        InvalidRequest: no ``dataset``, no grader and no settings, bad ``sampling``.
    """
    from ..evals.kind import DEFAULT_SAMPLING  # lazy: httpx
    from ..evals.settings import grader_text  # lazy: httpx

    if not body.get("dataset"):
        raise InvalidRequest(
            "compare: needs dataset, the rows the source snapshot and every branch answer "
            "(--compare --dataset D).",
            field="dataset",
        )
    project = session.scalar(select(Project).where(Project.name == source.project))
    cfg = (project.evaluation if project is not None else None) or {}
    grader, instructions = body.get("grader"), body.get("graderInstructions")
    sampling = dict(DEFAULT_SAMPLING)
    if not grader:
        if not cfg:
            raise InvalidRequest(
                f"compare: needs a grader (--grader), since project {source.project!r} has no "
                "evaluation settings to take it from.",
                field="grader",
            )
        grader = grader_text(cfg)
        instructions = instructions if instructions is not None else cfg.get("graderInstructions")
        sampling.update(cfg.get("sampling") or {})
    given = body.get("sampling") or {}
    if not isinstance(given, dict):
        raise InvalidRequest("sampling must be an object.", field="sampling")
    try:
        checked = Sampling.model_validate(given).model_dump(include=set(given))
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise InvalidRequest(f"sampling.{loc}: {e['msg']}.", field=f"sampling.{loc}") from exc
    sampling.update(checked)
    return {
        "dataset": str(body["dataset"]),
        "grader": str(grader),
        "grader_instructions": instructions,
        "sampling": sampling,
    }


def start_sweep(
    ctx: ServiceContext, session: Session, principal: Principal, run_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    """One branch of run ``run_id`` per grid point from one of its snapshots (``body``:
    ``snapshot``, ``steps``, ``grid``, optional ``dataset``); with ``compare`` (and
    ``dataset``), also the comparison of the source snapshot against every branch, queued
    until they have all ended, scored as :func:`sweep_scoring` says. Returns the sweep's
    answer (:func:`akka_optimize.jobs.sweeps.submit_sweep`: ``points``, …, and
    ``comparison`` with ``compare``). Nothing is created when any point, or the
    comparison, is refused.

    Raises:
        InvalidRequest: (naming the field) a field a sweep does not take, a missing
            ``snapshot``/``steps``/``grid``, an empty grid, ``steps`` below 1; as
            :func:`sweep_scoring` and ``submit_sweep`` (PlanRefused for a refused point).
        NotFound: no such run the caller sees.
    """
    unknown = sorted(set(body) - SWEEP_FIELDS)
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: not a sweep field; a sweep takes {', '.join(sorted(SWEEP_FIELDS))}.",
            field=unknown[0],
        )
    for key in ("snapshot", "steps", "grid"):
        if body.get(key) is None or body.get(key) == "":
            raise InvalidRequest(f"A sweep needs {key}.", field=key)
    if body["grid"] in ([], {}):
        raise InvalidRequest("The grid is empty; give at least one point.", field="grid")
    whole_number(body["steps"], "steps", low=1)
    source = access.find_run(principal, session, run_id)
    compare = sweep_scoring(session, source, body) if body.get("compare") else None
    out = sweeps.submit_sweep(
        ctx,
        session,
        source,
        snapshot=str(body["snapshot"]),
        steps=body["steps"],
        grid=body["grid"],
        dataset=body.get("dataset"),
        resolve=lambda raw: resolve_run_plan(ctx, session, raw, principal),
        principal=principal,
    )
    if compare is not None:
        from ..evals import kind as evals  # lazy: guarded
        from ..evals.sweeps import start_sweep_comparison  # lazy: guarded

        def resolve(kind: str, ref: str, *, field: str) -> Any:
            return access.resolve(principal, session, kind, ref, source.project, field=field)

        out["comparison"] = start_sweep_comparison(
            ctx,
            session,
            source,
            branches.parse_snapshot(str(body["snapshot"])),
            out["points"],
            **compare,
            device_kind=evals.eval_device_kind(ctx.settings),
            resolve=resolve,
        )
    return out
