"""Who may act on what in the Tinker protocol (issue 48 item 3): a project key acts on its
project's sessions, training and sampling clients and futures only, and another
project's object reads as a missing one; an admin key acts on any, in the project its
session names."""

from __future__ import annotations

from typing import Any

from ...db.models.projects import Project
from ...errors import Forbidden, InvalidRequest, NotFound
from ...tinker.broker import Broker, Model, Session, broker_of
from ..auth import Principal
from ..context import ServiceContext


def tinker_project(ctx: ServiceContext, p: Principal, wanted: str | None) -> str:
    """The project a session acts in: the key's own, else ``project_id`` (admin keys)."""
    if p.project:
        if wanted and wanted.strip().lower() != p.project:
            raise Forbidden(
                f"project_id {wanted!r}: this key acts only in project {p.project!r}.",
                field="project_id",
            )
        return p.project
    if not wanted:
        raise InvalidRequest(
            "project_id is not set: an admin key needs TINKER_PROJECT_ID (or "
            "ServiceClient(project_id=...)); a project key (`server token create --project P "
            "--tinker`) needs none.",
            field="project_id",
        )
    from sqlalchemy import or_, select

    key = wanted.strip()
    with ctx.db.session() as s:
        name = s.scalar(
            select(Project.name).where(or_(Project.name == key.lower(), Project.id == key))
        )
    if name is None:
        raise NotFound(f"project_id {wanted!r}: no such training project.", field="project_id")
    return name


def mine(p: Principal, project: str) -> bool:
    """Whether key ``p`` acts on an object of ``project`` (an admin key acts on any)."""
    return not p.project or p.project == project


def tinker_int(body: dict[str, Any], key: str, default: int) -> int:
    """``body[key]`` as a whole number ≥ 0 (``default`` when absent).

    Raises:
        InvalidRequest: (``key``) not a whole number, or negative.
    """
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(f"{key} is {value!r:.40}; give a whole number ≥ 0.", field=key)
    return value


def session(b: Broker, p: Principal, sid: str) -> Session:
    """Session ``sid`` of the caller's project.

    Raises:
        NotFound: (``session_id``) no such session, or another project's.
    """
    sess = b.sessions.get(sid)
    if sess is None or not mine(p, sess.project):
        raise NotFound(f"session_id {sid!r}: no such session for this key.", field="session_id")
    return sess


def tinker_model(
    ctx: ServiceContext, p: Principal, model_id: str, sampler_ok: bool = False
) -> Model:
    """Training client ``model_id`` of the caller's project (a sampling client too when
    ``sampler_ok``).

    Raises:
        NotFound: (``model_id``) no such client, another project's, or a sampling client.
    """
    m = broker_of(ctx).model_of(model_id)
    if m is None or not mine(p, m.project) or (m.sampler and not sampler_ok):
        raise NotFound(f"model_id {model_id!r}: no such training client.", field="model_id")
    return m
