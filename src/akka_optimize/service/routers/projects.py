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
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...db.models.projects import Project
from ...errors import Conflict
from ...refs import validate_name
from .. import access
from ..auth import Principal
from ..deps import PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/training/projects", tags=["projects"])


class ProjectCreate(BaseModel):
    """``POST /v1/training/projects``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="The project's name: lower-case letters, digits, '.', '_' and '-'; "
        "it cannot change."
    )


def project_view(p: Project) -> dict[str, Any]:
    """The API shape of a project."""
    created = p.created_at.isoformat() if p.created_at else None
    return {"id": p.id, "name": p.name, "createdAt": created}


def find_project(session: Session, key: str, principal: Principal | None = None) -> Project:
    """The project named ``key`` (case-insensitive) or with ID ``key``, among those
    ``principal`` sees (every project when None).

    Raises:
        NotFound: (field ``project``) no such project, or one the caller does not see; the
            message says how to create it.
    """
    p = session.scalars(
        select(Project).where(or_(Project.name == key.lower(), Project.id == key))
    ).first()
    if p is None or not access.can_see_project(principal, p.name):
        raise access.project_not_found(key)
    return p


@router.post("", status_code=201)
def create_project(
    body: ProjectCreate, session: SessionDep, principal: PrincipalDep
) -> JSONResponse:
    """Create a training project (admin tokens only: 403 ``optimize.training.projects.create``
    for a project token). 409 when the name is taken; 400 naming ``name`` when it breaks
    the naming rule."""
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
    return JSONResponse(project_view(p), status_code=201)


@router.get("")
def list_projects(session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every training project the caller sees, by name."""
    rows = session.scalars(select(Project).order_by(Project.name)).all()
    return {
        "projects": [project_view(p) for p in rows if access.can_see_project(principal, p.name)]
    }


@router.get("/{project}")
def get_project(project: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """One training project by name or ID (404 for one the caller does not see)."""
    return project_view(find_project(session, project, principal))
