"""What an evaluation or a comparison shows: its API record, its lookup and its examples.

The views of ``GET /v1/training/evaluations`` and ``…/comparisons`` (:func:`evaluation_view`,
:func:`comparison_view`, a sweep's :func:`fan_view`), finding one by ID prefix
(:func:`find_evaluation`), listing them, and reading a finished one's scored examples
(:func:`read_examples`, :func:`most_different`).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import InvalidRequest, NotFound
from ..jobs import states as S
from ..jobs.views import project_fields
from .request import COMPARE, METHOD


def iso_time(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def evaluation_view(
    s: Session, run: Run, *, examples: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The API record of an evaluation (``GET /v1/training/evaluations/ID``)."""
    r = run.resolved or {}
    res = run.results or {}
    out: dict[str, Any] = {
        "id": run.id,
        **project_fields(s, run.project),
        "state": run.state,
        "phase": run.phase_detail,
        "queueReason": run.queue_reason if run.state == S.QUEUED else None,
        "modelId": r.get("modelId"),
        "model": r.get("model"),
        "baseModel": r.get("baseModel"),
        "dataset": r.get("dataset"),
        "grader": (r.get("grader") or {}).get("spec"),
        "bundle": (r.get("grader") or {}).get("bundle"),
        "graderInstructions": r.get("graderInstructions"),
        "instructionsSource": r.get("instructionsSource"),
        "judge": (r.get("grader") or {}).get("judge"),
        "judgeEndpoint": res.get("judgeEndpoint"),
        "claims": r.get("claims"),
        "sampling": r.get("sampling"),
        "limit": r.get("limit"),
        "progress": {"completed": run.current_step or 0, "total": run.total_steps or 0},
        "results": {
            k: res.get(k) for k in ("mean", "stderr", "count", "scored", "errors", "errorShare")
        }
        if "mean" in res
        else None,
        "maxErrorShare": r.get("maxErrorShare"),
        "failureReason": run.failure_reason,
        "createdAt": iso_time(run.created_at),
        "startedAt": iso_time(run.started_at),
        "finishedAt": iso_time(run.finished_at),
    }
    if examples is not None:
        out["examples"] = examples
    return out


def find_evaluation(
    s: Session, evaluation_id: str, project: str | None, method: str = METHOD
) -> Run:
    """The evaluation (``method`` ``eval``), comparison (``compare``) or curation
    (``curate``) with this ID or unambiguous ID prefix, in ``project`` when given.

    Raises:
        NotFound: no such evaluation (field ``evaluation``, ``comparison`` or ``curation``).
        InvalidRequest: the prefix matches several.
    """
    what = {METHOD: "evaluation", COMPARE: "comparison"}.get(method, "curation")
    run = s.get(Run, evaluation_id)
    if run is not None and run.method == method and (project is None or run.project == project):
        return run
    q = (
        select(Run)
        .where(Run.method == method, Run.id.startswith(evaluation_id.lower(), autoescape=True))
        .limit(3)
    )
    if project is not None:
        q = q.where(Run.project == project)
    found = s.scalars(q).all()
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"No {what} {evaluation_id!r}.", field=what)
    raise InvalidRequest(
        f"The {what} ID prefix {evaluation_id!r} matches several {what}s; give more of it.",
        field=what,
    )


def list_evaluations(
    s: Session, project: str | None, limit: int = 100, method: str = METHOD
) -> list[dict[str, Any]]:
    """Newest evaluations (or comparisons, ``method="compare"``) first, optionally of one
    project."""
    q = select(Run).where(Run.method == method).order_by(Run.created_at.desc()).limit(limit)
    if project:
        q = q.where(Run.project == project)
    view = evaluation_view if method == METHOD else comparison_view
    return [view(s, r) for r in s.scalars(q)]


def comparison_view(
    s: Session, run: Run, *, examples: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The API record of a comparison (``GET /v1/training/comparisons/ID``): both models,
    wins/losses/ties of the candidate, the mean score difference with its paired 95%
    confidence interval, each side's mean, and the examples that differ most."""
    out = evaluation_view(s, run)
    r = run.resolved or {}
    res = run.results or {}
    sides = r.get("sides") or []
    out["baselineModelId"] = sides[1]["modelId"] if len(sides) > 1 else None
    out["baselineModel"] = sides[1]["model"] if len(sides) > 1 else None
    keys = ("wins", "losses", "ties", "pairs", "errors", "meanDifference", "ci95")
    out["results"] = (
        {
            **{k: res.get(k) for k in keys},
            "candidate": res.get("candidate"),
            "baseline": res.get("baseline"),
        }
        if "wins" in res
        else None
    )
    out["mostDifferent"] = res.get("mostDifferent")
    if r.get("kind") == "sweep":
        out.update(fan_view(r, res))
    if examples is not None:
        out["examples"] = examples
    return out


def fan_view(r: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """A sweep comparison's own fields: ``sweep`` (source run, snapshot, branches),
    ``leftOut`` (branches that did not succeed) and, once scored, ``fan``: one row per
    branch — its run, grid point, model, mean, standard error, and wins, losses, ties and
    paired difference against the source snapshot — best mean first (ties by run)."""
    sides = r.get("sides") or []
    rows = []
    for i, f in enumerate(res.get("fan") or [], start=1):
        side = sides[i] if i < len(sides) else {}
        rows.append(
            {
                "run": side.get("run"),
                "point": side.get("point"),
                "model": side.get("modelId"),
                **{k: f.get(k) for k in ("mean", "stderr", "count", "errors")},
                "vsSource": f.get("vsSource"),
            }
        )
    rows.sort(key=lambda x: (-(x["mean"] if x["mean"] is not None else -1e9), x["run"] or ""))
    return {
        "baselineModelId": None,
        "baselineModel": None,
        "sweep": {
            "source": r.get("source"),
            "snapshot": r.get("snapshot"),
            "branches": [b["run"] for b in r.get("branches") or []],
        },
        "source": res.get("baseline"),
        "leftOut": r.get("leftOut") or [],
        "fan": rows if res.get("fan") else None,
    }


def most_different(examples: list[dict[str, Any]], n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` example pairs whose scores differ most (both scored), largest first."""
    pairs = [e for e in examples if e.get("scoreA") is not None and e.get("scoreB") is not None]
    pairs = [e for e in pairs if e["scoreA"] != e["scoreB"]]
    pairs.sort(key=lambda e: (-abs(e["scoreA"] - e["scoreB"]), e["index"]))
    keep = ("index", "scoreA", "scoreB", "answerA", "answerB")
    return [{k: e.get(k) for k in keep} for e in pairs[:n]]


def read_examples(
    store: Any, run: Run, results: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every scored example of a finished evaluation (prompt, answer, score, details, error;
    a comparison's carry both sides' as ``answerA``/``answerB``, ``scoreA``/``scoreB``…)."""
    key = (results if results is not None else run.results or {}).get("examplesKey")
    if not key:
        return []
    text = store.get_bytes(key).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
