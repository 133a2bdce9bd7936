"""Access to runs (:mod:`akka_optimize.core.access.rules`): a run another project's
token cannot see answers 404, and a branch, a warm start or a comparison never links two
projects (403)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Run
from ...errors import InvalidRequest, NotFound
from ...refs import parse_ref
from ..auth import Principal
from .scope import refusal, scope


def find_run(principal: Principal | None, session: Session, run_id: str) -> Run:
    """The run with this ID or unambiguous ID prefix among the runs the caller sees.

    Raises:
        NotFound: (field ``run``) no such run, or only other projects' runs match.
        InvalidRequest: (field ``run``) the prefix matches several visible runs.
    """
    mine = scope(principal)
    run = session.get(Run, run_id)
    if run is not None and (mine is None or run.project.lower() == mine):
        return run
    q = select(Run).where(Run.id.startswith(run_id.lower(), autoescape=True)).limit(3)
    if mine is not None:
        q = q.where(Run.project == mine)
    matches = session.scalars(q).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"No run {run_id!r}.", field="run")
    raise InvalidRequest(
        f"The run ID prefix {run_id!r} matches several runs; give more of it.", field="run"
    )


def check_branch(principal: Principal | None, session: Session, plan: dict[str, Any]) -> None:
    """A plan's ``branchFrom.run`` must be a visible run of the plan's own project.

    Raises:
        InvalidRequest: (``branchFrom.run``) the caller sees no such run (the sentence a
            missing run gets).
        Forbidden: (``runs.branch``) the run belongs to another project.
    """
    ref = plan.get("branchFrom")
    if not isinstance(ref, dict) or not ref.get("run"):
        return
    try:
        source = find_run(principal, session, str(ref["run"]))
    except NotFound as exc:
        raise InvalidRequest(f"branchFrom.run: {exc.message}", field="branchFrom.run") from exc
    project = str(plan.get("project", "")).lower()
    if source.project.lower() != project:
        raise refusal(
            "runs.branch",
            f"branchFrom.run {source.id} belongs to training project {source.project!r}, not "
            f"to the plan's project {project!r}; a branch stays in its source's project",
            field="branchFrom.run",
        )


def check_warm_start(plan: dict[str, Any]) -> None:
    """A resolved plan's ``warmStartModelId`` must name a model of the plan's project.

    Raises:
        Forbidden: (``runs.warmStart``) the model's namespace is another project's.
    """
    ref = plan.get("warmStartModelId")
    if not ref:
        return
    project = str(plan.get("project", "")).lower()
    r = parse_ref(str(ref), project, field="warmStartModelId")
    if r.namespace != project:
        raise refusal(
            "runs.warmStart",
            f"warmStartModelId {ref!r} is a model of namespace {r.namespace!r}, not of the "
            f"plan's project {project!r}; a run warm-starts only from its own project's models",
            field="warmStartModelId",
        )


def check_compare(run: Run, baseline: Run) -> None:
    """Two compared runs must belong to one project. Raises Forbidden (``runs.compare``)."""
    if run.project.lower() != baseline.project.lower():
        raise refusal(
            "runs.compare",
            f"Run {run.id} belongs to training project {run.project!r} and baseline "
            f"{baseline.id} to {baseline.project!r}; compare runs of one project",
            field="baseline",
        )
