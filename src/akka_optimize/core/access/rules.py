"""Who may see and change what: the one place the service decides access (issue 14 item 1).

A caller is a :class:`~akka_optimize.core.auth.Principal`:

- an **admin** (the development token, or a token issued without ``--project``) acts in
  every project;
- a **project token** (``server token create --project P``) acts only in ``P``.

For a project token:

- objects of other projects are invisible: a run, endpoint, project, registry version or
  image of another project answers the same 404 as one that does not exist, and lists
  leave them out;
- writes that name another project or registry namespace (a plan's ``project``, an
  endpoint's ``project``, ``registry … register B/NAME``, an alias or annotation of
  ``B/NAME``) and creating a project are refused with 403;
- base models (registry models of ``source="base"``) are shared: every token reads them.

For every token, work never links two projects: a branch, a warm start, an endpoint's
model and a comparison stay inside one project (403 otherwise).

Every 403 names its action, ``optimize.training.projects.<action>`` (:data:`ACTIONS`), in
its sentence and in ``error.details.action``.

The rules of projects live here; those of runs in :mod:`.access_runs`, of registry
artifacts and images in :mod:`.access_registry`, and the actions and a caller's scope in
:mod:`.access_scope`. Every one of them is importable from this module.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ...db.models.projects import Project
from ...errors import InvalidRequest, NotFound
from ..auth import Principal
from .registry import can_read_image as can_read_image
from .registry import check_namespace_write as check_namespace_write
from .registry import check_visible_ref as check_visible_ref
from .registry import filter_names as filter_names
from .registry import record_images as record_images
from .registry import resolve as resolve
from .runs import check_branch as check_branch
from .runs import check_compare as check_compare
from .runs import check_warm_start as check_warm_start
from .runs import find_run as find_run
from .scope import ACTIONS as ACTIONS
from .scope import refusal as refusal
from .scope import scope as scope
from .scope import scoped_phrase


# -- projects ----------------------------------------------------------------------
def project_not_found(key: str) -> NotFound:
    """The 404 of a project that does not exist, or that the caller cannot see."""
    return NotFound(
        f"No training project {key!r}; create it with `training projects create NAME`.",
        field="project",
    )


def can_see_project(principal: Principal | None, name: str) -> bool:
    """Whether the caller sees the project called ``name``."""
    mine = scope(principal)
    return mine is None or name.lower() == mine


def check_create_project(principal: Principal | None, name: str) -> None:
    """Only an admin creates projects. Raises Forbidden (``create``)."""
    mine = scope(principal)
    if mine is not None:
        raise refusal(
            "create",
            f"Creating training project {name!r} needs an admin token; {scoped_phrase(mine)}",
            field="name",
        )


def check_project_write(
    principal: Principal | None, project: Any, action: str, field: str = "project"
) -> None:
    """Refuse (403, naming ``action``) work a project token asks for in another project.

    A ``project`` that is not a string is left to the request's own validation.
    """
    mine = scope(principal)
    if mine is not None and isinstance(project, str) and project.strip().lower() != mine:
        raise refusal(
            action,
            f"{field} {project!r} is another training project; {scoped_phrase(mine)}",
            field=field,
        )


def check_project_key_write(
    principal: Principal | None, session: Session, key: str, action: str, field: str = "project"
) -> None:
    """As :func:`check_project_write` for a project named by name or ID; any key that is
    not the caller's own project is refused alike, whether that project exists or not."""
    if scope(principal) is None:
        return
    q = select(Project.name).where(or_(Project.name == key.strip().lower(), Project.id == key))
    check_project_write(principal, session.scalar(q) or key, action, field)


def list_scope(principal: Principal | None, requested: str | None) -> tuple[bool, str | None]:
    """``(anything_visible, project_filter)`` for a list filtered by ``requested``.

    An admin gets ``(True, requested)``; a project token ``(True, its project)`` unless it
    asked for another project, which lists nothing: ``(False, None)``.
    """
    mine = scope(principal)
    if mine is None:
        return True, requested
    if requested and requested.lower() != mine:
        return False, None
    return True, mine


def project_id(principal: Principal | None, session: Session) -> str | None:
    """The ID of the caller's project (None for an admin; ``""`` when it does not exist)."""
    mine = scope(principal)
    if mine is None:
        return None
    return session.scalar(select(Project.id).where(Project.name == mine)) or ""


# -- artifacts' projects -----------------------------------------------------------
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
    if p is None or not can_see_project(principal, p.name):
        raise project_not_found(key)
    return p


def project_of_model(
    principal: Principal | None,
    session: Session,
    model: Any,
    project: Project | None,
    action: str,
    *,
    work: str,
    field: str = "modelId",
) -> Project:
    """The project of ``work`` on ``model`` (a resolved model version), e.g. an evaluation
    or an endpoint: an adapter's own project when ``project`` is None; a base model needs
    ``project``, since it belongs to none.

    Args:
        work: what the work does with the model, for the sentence ("an evaluation of
            project P scores").

    Raises:
        Forbidden: (``action``, ``field``) ``project`` is not the adapter's project.
        InvalidRequest: (``project``) a base model without a project.
    """
    if model.source == "adapter":
        if project is None:
            return find_project(session, model.namespace, principal)
        if project.name != model.namespace:
            raise refusal(
                action,
                f"{model.repo} is a model of project {model.namespace!r}; "
                f"{work.format(project=repr(project.name))} only that project's models and "
                "base models",
                field=field,
            )
        return project
    if project is None:
        raise InvalidRequest(
            f"{model.repo} is a base model, which belongs to no project; name one with --project.",
            field="project",
        )
    return project
