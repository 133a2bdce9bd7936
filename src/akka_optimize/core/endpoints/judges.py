"""Judge endpoints: the endpoint that serves an evaluation's ``model:`` judge, one per
judge version and project, created and started for the evaluation's worker
(:mod:`akka_optimize.service.routers.endpoints.judges` forwards its chat completions)."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Run
from ...db.models.projects import Project
from ...db.models.serving import Endpoint
from ...errors import InvalidRequest, NotFound
from ...registry import resolve
from ..context import ServiceContext
from .records import find_endpoint, manager, models, new_endpoint, view

_JUDGE_LOCK = threading.Lock()


def judge_of(s: Session, run_id: str) -> tuple[Run, dict[str, Any]]:
    """The run ``run_id`` and its pinned judge grader (the resolved plan's ``grader``:
    ``judge``, the pinned version; ``judgeBase``; ``judgeModel``, its served name).

    Raises:
        InvalidRequest: (``judge_unavailable``) the run is not an evaluation graded by a
            ``model:`` judge.
    """

    run = s.get(Run, run_id)
    g = ((run.resolved or {}).get("grader") or {}) if run is not None else {}
    if run is None or not g.get("judge"):
        raise InvalidRequest(
            f"Run {run_id} is not an evaluation graded by a model: judge.",
            code="judge_unavailable",
        )
    return run, g


def judge_endpoints(s: Session, project_id: str, pinned: str) -> list[Endpoint]:
    """Endpoints of project ``project_id`` that serve exactly the version ``pinned`` (and
    nothing else), oldest first; an empty list when none does."""
    out = []
    for ep in s.scalars(
        select(Endpoint).where(Endpoint.project_id == project_id).order_by(Endpoint.created_at)
    ):
        rows = models(s, ep)
        if len(rows) == 1 and rows[0].pinned == pinned:
            out.append(ep)
    return out


def ensure_judge_endpoint(ctx: ServiceContext, run_id: str) -> dict[str, Any]:
    """The endpoint that serves run ``run_id``'s ``model:`` judge, created in the run's
    project when the project has none serving exactly that version (one endpoint per
    judge version and project, reused by later evaluations), and started when it is not
    running (a failed one is tried again). Returns its API view
    (:func:`~.endpoint_records.view`).

    Raises:
        InvalidRequest: the run has no judge (:func:`judge_of`). NotFound: its project is
            gone.
    """

    start = False
    with _JUDGE_LOCK:
        with ctx.db.session() as s:
            run, g = judge_of(s, run_id)
            project = s.scalar(select(Project).where(Project.name == run.project))
            if project is None:
                raise NotFound(f"Run {run_id}'s project {run.project!r} no longer exists.")
            found = judge_endpoints(s, project.id, g["judge"])
            if found:
                ep = found[-1]
                start = ep.state in ("FAILED", "STOPPED")
            else:
                rv = resolve(s, "model", g["judge"])
                rank = (rv.metadata or {}).get("rank") if rv.source == "adapter" else None
                row = {
                    "kind": "adapter" if rv.source == "adapter" else "base",
                    "rank": int(rank) if rank is not None else None,
                    "ref": rv.pinned,
                    "pinned": rv.pinned,
                    "served_name": f"{rv.repo}:v{rv.version}",
                    "instructions": rv.metadata.get("instructions")
                    or (rv.metadata.get("annotations") or {}).get("instructions"),
                }
                ep = new_endpoint(s, ctx, project.id, g["judgeBase"], row)
                start = True
            endpoint_id = ep.id
        if start:
            manager(ctx).request_start(endpoint_id)
    with ctx.db.session() as s:
        return view(s, find_endpoint(s, endpoint_id), ctx)


def judge_target(ctx: ServiceContext, run_id: str) -> tuple[str, str]:
    """``(endpoint ID, served name)`` a chat completion of run ``run_id``'s judge goes to:
    the newest endpoint of the run's project serving the judge version, and the judge's
    ``judgeModel`` (reads the state store: an async route calls it in the thread pool).

    Raises:
        InvalidRequest: (``judge_unavailable``) the run has no judge, or no endpoint
            serves it yet (``POST …/judge`` creates one).
    """

    with ctx.db.session() as s:
        run, g = judge_of(s, run_id)
        project = s.scalar(select(Project).where(Project.name == run.project))
        found = judge_endpoints(s, project.id, g["judge"]) if project else []
        if not found:
            raise InvalidRequest(
                f"Run {run_id}'s judge has no endpoint yet; POST …/judge first.",
                code="judge_unavailable",
            )
        return found[-1].id, g["judgeModel"]
