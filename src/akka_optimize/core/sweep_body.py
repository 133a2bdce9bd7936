"""The body of ``POST /v1/training/runs/RUN/sweep`` (:mod:`.run_records`): the fields it
takes and what the comparison of a sweep's branches scores with."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from ..db.models.projects import Project
from ..errors import InvalidRequest
from ..plan.pipeline import Sampling

SWEEP_FIELDS = frozenset(
    {"snapshot", "steps", "grid", "dataset", "compare", "grader", "graderInstructions", "sampling"}
)
"""The fields of ``POST /v1/training/runs/RUN/sweep``."""


def sweep_scoring(session: Any, source: Any, body: dict[str, Any]) -> dict[str, Any]:
    """What a sweep's comparison scores with: ``dataset`` (required), ``grader`` (else the
    project's evaluation settings' grader and instructions), ``sampling`` (the settings',
    then the body's, over the defaults).

    Raises:
        InvalidRequest: no ``dataset``, no grader and no settings, bad ``sampling``.
    """
    from pydantic import ValidationError

    from ..evals.kind import DEFAULT_SAMPLING  # lazy: httpx
    from ..evals.settings import grader_text  # lazy: httpx

    if not body.get("dataset"):
        raise InvalidRequest(
            "compare: needs dataset, the rows the source snapshot and every branch answer "
            "(--compare --dataset D).",
            field="dataset",
        )
    project = session.scalar(select(Project).where(Project.name == source.project))
    cfg = (project.evaluation if project is not None else None) or {}
    grader, instructions = body.get("grader"), body.get("graderInstructions")
    sampling = dict(DEFAULT_SAMPLING)
    if not grader:
        if not cfg:
            raise InvalidRequest(
                f"compare: needs a grader (--grader), since project {source.project!r} has no "
                "evaluation settings to take it from.",
                field="grader",
            )
        grader = grader_text(cfg)
        instructions = instructions if instructions is not None else cfg.get("graderInstructions")
        sampling.update(cfg.get("sampling") or {})
    given = body.get("sampling") or {}
    if not isinstance(given, dict):
        raise InvalidRequest("sampling must be an object.", field="sampling")
    try:
        checked = Sampling.model_validate(given).model_dump(include=set(given))
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise InvalidRequest(f"sampling.{loc}: {e['msg']}.", field=f"sampling.{loc}") from exc
    sampling.update(checked)
    return {
        "dataset": str(body["dataset"]),
        "grader": str(grader),
        "grader_instructions": instructions,
        "sampling": sampling,
    }
