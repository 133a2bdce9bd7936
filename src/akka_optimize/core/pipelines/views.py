"""Reading pipeline records (:mod:`akka_optimize.core.pipelines.records`): finding one by
ID or prefix, its API view and the list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Pipeline
from ...errors import InvalidRequest, NotFound
from ...jobs.views import project_fields


def find_pipeline(s: Session, pipeline_id: str, project: str | None) -> Pipeline:
    """The pipeline with this ID or unambiguous prefix, in ``project`` when given.

    Raises:
        NotFound: none (field ``pipeline``). InvalidRequest: the prefix matches several.
    """
    p = s.get(Pipeline, pipeline_id)
    if p is not None and (project is None or p.project == project):
        return p
    q = select(Pipeline).where(Pipeline.id.startswith(pipeline_id.lower(), autoescape=True))
    if project is not None:
        q = q.where(Pipeline.project == project)
    found = s.scalars(q.limit(3)).all()
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"No pipeline {pipeline_id!r}.", field="pipeline")
    raise InvalidRequest(
        f"The pipeline ID prefix {pipeline_id!r} matches several pipelines; give more of it.",
        field="pipeline",
    )


def _iso(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def pipeline_view(s: Session, p: Pipeline, *, settings: bool = True) -> dict[str, Any]:
    """The API record of a pipeline (``GET /v1/training/pipelines/ID``): its state, the
    configuration it ran (``configHash``) and every stage: name, kind, state, job, output,
    its own ``configHash`` (and its job's) and, with ``settings``, its resolved settings."""

    keep: Callable[[str], bool] = (
        (lambda k: k != "descriptor")
        if settings
        else (lambda k: k not in ("descriptor", "settings"))
    )
    return {
        "id": p.id,
        **project_fields(s, p.project),
        "state": p.state,
        "submissionId": p.submission_id,
        "configHash": p.config_hash,
        "stages": [{k: v for k, v in rec.items() if keep(k)} for rec in p.stages],
        "failureReason": p.failure_reason,
        "createdAt": _iso(p.created_at),
        "finishedAt": _iso(p.finished_at),
    }


def list_pipelines(s: Session, project: str | None, limit: int = 100) -> list[dict[str, Any]]:
    """Newest pipelines first (without stage settings), optionally of one project."""
    q = select(Pipeline).order_by(Pipeline.created_at.desc()).limit(limit)
    if project:
        q = q.where(Pipeline.project == project)
    return [pipeline_view(s, p, settings=False) for p in s.scalars(q)]
