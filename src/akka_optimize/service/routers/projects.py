"""Training projects under ``/v1/training/projects`` (seeds/001 "Workloads are training
projects", "Project names", "Project routes").

A project's name follows the registry's naming rules (:func:`akka_optimize.refs.
validate_name`), is the namespace of its models and of unqualified references, and
cannot change: there is no rename route. Responses carry the project's ``id`` and
``name``; text output names projects by name, JSON keeps the ID.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import Field
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...core.access import rules as access
from ...core.access.rules import find_project
from ...core.auth import Principal
from ...core.context import ServiceContext
from ...db.models.projects import Project
from ...errors import AkkaError, Conflict
from ...evals.settings import make_settings, project_scores, settings_view
from ...plan.pipeline import Sampling, documented
from ...plan.schema.base import RequestModel
from ...refs import GRADER_PATTERN, MAX_NAME_LENGTH, NAME_PATTERN, REF_PATTERN, validate_name
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import ProjectList, ProjectView, ScoresTable, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/projects", tags=["projects"])


class EvaluationSettings(RequestModel):
    """A project's evaluation settings (``PUT /v1/training/projects/P/evaluation``, or
    ``evaluation`` in ``POST /v1/training/projects``). The dataset and the grader's bundle
    are pinned to exact versions when accepted (:mod:`akka_optimize.evals.settings`)."""

    dataset: str = Field(
        min_length=1,
        description="Registry reference of the dataset.",
        json_schema_extra=documented(REF_PATTERN),
    )
    grader: str = Field(
        min_length=1,
        description="bundle:REFERENCE#MODULE[:FUNCTION] (compute_score by default).",
        json_schema_extra=documented(GRADER_PATTERN),
    )
    graderInstructions: str | None = Field(  # noqa: N815
        None, description="A model: judge's instructions (not read by a bundle grader)."
    )
    sampling: Sampling = Field(default_factory=Sampling)
    autoEvaluate: bool = Field(  # noqa: N815
        True,
        description="Queue an evaluation of every model version registered in the project.",
    )


class ProjectCreate(RequestModel):
    """``POST /v1/training/projects``."""

    name: str = Field(
        description="The project's name: lower-case letters, digits, '.', '_' and '-'; "
        "it cannot change.",
        # documented only: validate_name refuses a bad name with its own sentence
        json_schema_extra={"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH},
    )
    evaluation: EvaluationSettings | None = Field(
        None, description="The project's evaluation settings (set later with set-evaluation)."
    )


def project_view(p: Project) -> dict[str, Any]:
    """The API shape of a project: ``id``, ``name``, ``createdAt``, ``evaluation``."""
    created = p.created_at.isoformat() if p.created_at else None
    return {
        "id": p.id,
        "name": p.name,
        "createdAt": created,
        "evaluation": settings_view(p.evaluation),
    }


def _settings(
    ctx: ServiceContext, s: Session, principal: Principal, p: Project, body: EvaluationSettings
):
    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return access.resolve(principal, s, kind, ref, p.name, field=field)

    return make_settings(
        ctx,
        s,
        dataset=body.dataset,
        grader=body.grader,
        grader_instructions=body.graderInstructions,
        sampling=body.sampling.model_dump(),
        auto_evaluate=body.autoEvaluate,
        resolve=resolve,
    )


@router.post("", status_code=201, **answers(ProjectView, 201))
def create_project(
    body: ProjectCreate, session: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Create a training project (admin tokens only: 403 ``optimize.training.projects.create``
    for a project token), with its evaluation settings when given. 409 when the name is
    taken; 400 naming ``name`` when it breaks the naming rule, or the ``evaluation.*`` field
    its settings break (then no project is created)."""
    name = validate_name(body.name, "name")
    access.check_create_project(principal, name)
    if session.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(f"A training project named {name!r} already exists.", field="name")
    p = Project(id=uuid.uuid4().hex, name=name)
    try:
        with session.begin_nested():
            session.add(p)
            session.flush()
    except IntegrityError:  # a concurrent request created it first
        raise Conflict(f"A training project named {name!r} already exists.", field="name") from None
    if body.evaluation is not None:
        try:
            p.evaluation = _settings(ctx, session, principal, p, body.evaluation)
        except AkkaError as exc:  # the field is under ``evaluation``; the project goes too
            exc.field = f"evaluation.{exc.field}" if exc.field else "evaluation"
            raise
    return JSONResponse(project_view(p), status_code=201)


@router.get("", **answers(ProjectList))
def list_projects(session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every training project the caller sees, by name."""
    rows = session.scalars(select(Project).order_by(Project.name)).all()
    return {
        "projects": [project_view(p) for p in rows if access.can_see_project(principal, p.name)]
    }


@router.get("/{project}", **answers(ProjectView))
def get_project(project: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """One training project by name or ID (404 for one the caller does not see)."""
    return project_view(find_project(session, project, principal))


@router.put("/{project}/evaluation", **answers(ProjectView))
def set_evaluation(
    project: str,
    body: EvaluationSettings,
    session: SessionDep,
    ctx: CtxDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Set a project's evaluation settings (``training projects set-evaluation``); the
    dataset and bundle are pinned now. 403 ``optimize.training.projects.evaluations.settings``
    for another project's token; 400 naming the field the settings break (the earlier
    settings stay)."""
    access.check_project_key_write(principal, session, project, "evaluations.settings")
    p = find_project(session, project, principal)
    p.evaluation = _settings(ctx, session, principal, p, body)
    return project_view(p)


@router.get("/{project}/scores", **answers(ScoresTable))
def get_scores(project: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """The project's scores table (``training projects scores``): one row per base-model
    version, its models' newest scores on the project's evaluation settings, best first.
    409 when the project has no evaluation settings."""
    return project_scores(session, find_project(session, project, principal))
