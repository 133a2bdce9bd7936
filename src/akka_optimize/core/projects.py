"""Training projects (seeds/001 "Workloads are training projects", "Project names",
"Project routes"), without HTTP: creating one, listing those a caller sees, their API
shape and their evaluation settings (:mod:`akka_optimize.service.routers.projects`
holds the routes).

A project's name follows the registry's naming rules (:func:`akka_optimize.refs.
validate_name`) and cannot change.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.models.projects import Project
from ..errors import AkkaError, Conflict
from ..evals.settings import make_settings, settings_view
from ..refs import validate_name
from .access import rules as access
from .auth import Principal
from .context import ServiceContext


def project_view(p: Project) -> dict[str, Any]:
    """The API shape of a project: ``id``, ``name``, ``createdAt`` (ISO 8601 or None),
    ``evaluation`` (:func:`akka_optimize.evals.settings.settings_view`)."""
    created = p.created_at.isoformat() if p.created_at else None
    return {
        "id": p.id,
        "name": p.name,
        "createdAt": created,
        "evaluation": settings_view(p.evaluation),
    }


def evaluation_settings(
    ctx: ServiceContext, s: Session, principal: Principal, p: Project, body: dict[str, Any]
) -> dict[str, Any]:
    """Checked, pinned evaluation settings of project ``p`` (what ``Project.evaluation``
    keeps) from ``body``, the request's fields (``dataset``, ``grader``,
    ``graderInstructions``, ``sampling`` as a dict, ``autoEvaluate``); references resolve
    among the versions ``principal`` sees, in the project.

    Raises:
        InvalidRequest / NotFound: as :func:`akka_optimize.evals.settings.make_settings`,
            naming the field the settings break.
    """

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return access.resolve(principal, s, kind, ref, p.name, field=field)

    return make_settings(
        ctx,
        s,
        dataset=body["dataset"],
        grader=body["grader"],
        grader_instructions=body.get("graderInstructions"),
        sampling=body["sampling"],
        auto_evaluate=body["autoEvaluate"],
        resolve=resolve,
    )


def create_project(
    ctx: ServiceContext,
    s: Session,
    principal: Principal,
    name: str,
    evaluation: dict[str, Any] | None,
) -> Project:
    """A new training project named ``name``, with its evaluation settings when
    ``evaluation`` (as :func:`evaluation_settings` takes them) is given; added to ``s``
    (the caller's transaction commits it).

    Raises:
        InvalidRequest: (``name``) a name that breaks the naming rule; (``evaluation.*``)
            the field the settings break, the transaction then holding no project.
        Forbidden: a project token (``optimize.training.projects.create``).
        Conflict: (``name``) the name is taken.
    """
    name = validate_name(name, "name")
    access.check_create_project(principal, name)
    if s.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(f"A training project named {name!r} already exists.", field="name")
    p = Project(id=uuid.uuid4().hex, name=name)
    try:
        with s.begin_nested():
            s.add(p)
            s.flush()
    except IntegrityError:  # a concurrent request created it first
        raise Conflict(f"A training project named {name!r} already exists.", field="name") from None
    if evaluation is not None:
        try:
            p.evaluation = evaluation_settings(ctx, s, principal, p, evaluation)
        except AkkaError as exc:  # the field is under ``evaluation``; the project goes too
            exc.field = f"evaluation.{exc.field}" if exc.field else "evaluation"
            raise
    return p


def visible_projects(s: Session, principal: Principal) -> list[Project]:
    """Every training project ``principal`` sees, by name."""
    rows = s.scalars(select(Project).order_by(Project.name)).all()
    return [p for p in rows if access.can_see_project(principal, p.name)]


def set_evaluation(
    ctx: ServiceContext, s: Session, principal: Principal, key: str, body: dict[str, Any]
) -> Project:
    """Project ``key`` (name or ID) with its evaluation settings replaced by ``body`` (as
    :func:`evaluation_settings` takes them), pinned now.

    Raises:
        Forbidden: another project's token (``optimize.training.projects.evaluations.
            settings``). NotFound: no such project the caller sees. InvalidRequest: the
            field the settings break (the earlier settings stay).
    """
    access.check_project_key_write(principal, s, key, "evaluations.settings")
    p = access.find_project(s, key, principal)
    p.evaluation = evaluation_settings(ctx, s, principal, p, body)
    return p
