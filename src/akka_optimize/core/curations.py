"""Curations (seeds/001 "Datasets live in the registry"; FEATURES F023) as a caller lists
them, without HTTP (:mod:`akka_optimize.service.routers.curations` holds the routes; the
job kind is :mod:`akka_optimize.evals.curation.kind`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..evals.curation import kind as curation
from .access import rules as access
from .auth import Principal


def visible_curations(
    s: Session, principal: Principal, project: str | None, limit: int
) -> list[dict[str, Any]]:
    """API views (:func:`akka_optimize.evals.curation.kind.curation_view`) of at most
    ``limit`` curations, newest first, of the projects ``principal`` sees (of ``project``,
    a name, when given); empty when a project token asks for another project."""
    visible, project = access.list_scope(principal, project)
    if not visible:
        return []
    q = select(Run).where(Run.method == curation.METHOD).order_by(Run.created_at.desc())
    if project:
        q = q.where(Run.project == project)
    return [curation.curation_view(s, r) for r in s.scalars(q.limit(limit))]
