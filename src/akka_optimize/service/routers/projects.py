"""Training projects under ``/v1/training/projects`` (seeds/001 "Workloads are training
projects", "Project names", "Project routes").

A project's name follows the registry's naming rules (:func:`akka_optimize.refs.
validate_name`), is the namespace of its models and of unqualified references, and
cannot change: there is no rename route. Responses carry the project's ``id`` and
``name``; text output names projects by name, JSON keeps the ID.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import Field

from ...core import projects
from ...core.access.rules import find_project
from ...core.projects import project_view
from ...evals.settings import project_scores
from ...plan.pipeline import Sampling, documented
from ...plan.schema.base import RequestModel
from ...refs import GRADER_PATTERN, MAX_NAME_LENGTH, NAME_PATTERN, REF_PATTERN
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


@router.post("", status_code=201, **answers(ProjectView, 201))
def create_project(
    body: ProjectCreate, session: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Create a training project (admin tokens only: 403 ``optimize.training.projects.create``
    for a project token), with its evaluation settings when given. 409 when the name is
    taken; 400 naming ``name`` when it breaks the naming rule, or the ``evaluation.*`` field
    its settings break (then no project is created)."""
    evaluation = body.evaluation.model_dump() if body.evaluation is not None else None
    p = projects.create_project(ctx, session, principal, body.name, evaluation)
    return JSONResponse(project_view(p), status_code=201)


@router.get("", **answers(ProjectList))
def list_projects(session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every training project the caller sees, by name."""
    return {"projects": [project_view(p) for p in projects.visible_projects(session, principal)]}


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
    p = projects.set_evaluation(ctx, session, principal, project, body.model_dump())
    return project_view(p)


@router.get("/{project}/scores", **answers(ScoresTable))
def get_scores(project: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """The project's scores table (``training projects scores``): one row per base-model
    version, its models' newest scores on the project's evaluation settings, best first.
    409 when the project has no evaluation settings."""
    return project_scores(session, find_project(session, project, principal))
