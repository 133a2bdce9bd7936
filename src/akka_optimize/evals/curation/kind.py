"""Curations: a ``model:`` judge scores every row of a dataset, the rows a keep rule keeps
are registered as a new dataset (seeds/001 "Datasets live in the registry": "A curation
specifies the dataset name for its registered output, such as oasst1/curated. The judge's
dataset is registered beside it, with a -judge suffix"; FEATURES F023; issue 19 item 1).

A curation is a run record whose ``method`` is ``curate`` (:mod:`akka_optimize.jobs.kinds`):
the same scheduler, states, cancel and recovery as an evaluation. Its request names:

- ``source``: the dataset to curate (a registry reference, pinned at acceptance); every
  row is a conversation that ends with an assistant message, the answer the judge scores;
- ``judge``: ``model:REFERENCE``, a base model or an adapter, served on its own endpoint
  in the project (as an evaluation's judge, :mod:`akka_optimize.evals.graders.judges`);
- ``judgeInstructions``: the judge's instructions; left out, the judge's own training
  instructions, else :data:`BUILT_IN` with the source's first system message as context
  (the same three sources as an evaluation's judge);
- ``keep``: which rows are kept (:func:`kept_rows`): ``minScore`` keeps the rows whose
  score is at least that number (scores are in [0, 1]: the judge's 0–10 over 10), and
  ``topShare`` keeps the best share of the rows (``ceil(share × rows)``, ties broken by
  row order); given both, a row must pass both. A row the judge could not score is never
  kept;
- ``dataset``: the output's name, ``NS/NAME`` (a bare ``NAME`` in the project). A request
  without it is refused naming ``dataset``.

When it succeeds, the registry holds two new versions, both with ``metadata.curation``
naming the curation, the pinned source version and the pinned judge version:

- ``dataset`` (``oasst1/curated``): the kept rows, exactly as in the source, in its order;
- ``dataset-judge`` (``oasst1/curated-judge``): every source row, with
  ``extra_info.curation`` = ``{"row", "score", "judgeReply", "kept", "error"}``.

A curation whose judge could not score more than :data:`~akka_optimize.evals.kind.MAX_ERROR_SHARE`
of the rows, or that keeps no row, fails with a sentence (its judge dataset is still
registered, so the scores can be read).

Its parts: :mod:`akka_optimize.evals.curation.request` (the request's checks and the keep
rule) and :mod:`akka_optimize.evals.curation.judging` (the worker: the judge scores, the
rule keeps); this module records, launches, finishes and shows curations and registers the
``curate`` kind.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ...db.models.jobs import Run, RunAttempt
from ...jobs import states as S
from ...jobs.context import JobContext
from ...jobs.kinds import JobKind, Launch
from ...jobs.records import end_attempt
from ...jobs.scheduler import wake
from ...jobs.spec import JobSpec
from ...jobs.views import project_fields
from ...registry import register_dataset, resolve
from ..kind import evaluation_claims, iso_time, record_progress  # the evaluation kind's, shared
from .judging import curation_messages as curation_messages
from .request import BUILT_IN as BUILT_IN
from .request import Keep as Keep
from .request import check_curation as check_curation
from .request import kept_rows as kept_rows
from .request import output_names as output_names
from .request import parse_keep as parse_keep

METHOD = "curate"
"""The run ``method`` of a curation."""


def start_curation(
    ctx: JobContext, s: Session, resolved: dict[str, Any], raw: dict[str, Any], device_kind: str
) -> dict[str, Any]:
    """Record a curation checked by :func:`check_curation`; it waits ``QUEUED`` until the
    scheduler starts it. Returns its view.

    Raises:
        InvalidRequest: ``quota_exceeded`` (no quota or pool could ever admit its claims);
            nothing is created.
    """

    claims = evaluation_claims(ctx, resolved["project"], device_kind, True)
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=resolved["project"],
        method=METHOD,
        state=S.QUEUED,
        plan=raw,
        resolved={**resolved, "claims": claims},
        config_hash=digest,
        base_model=resolved["grader"]["judgeBase"],
        dataset=resolved["source"],
        validation_dataset=None,
        model_name=resolved["dataset"],
        device_kind=device_kind,
        gpus=0,
        total_steps=resolved["sourceRows"],
        results={},
        queue_reason="waiting for the scheduler",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return curation_view(s, run)


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of a curation attempt (the ``curate`` kind's ``build_spec``)."""

    s, r = launch.session, launch.run.resolved
    grader = {**r["grader"], "kind": "model", "instructions": r["judgeInstructions"]}
    return launch.spec(
        dataset=resolve(s, "dataset", r["source"]).to_dict(),
        extra={"curation": {"grader": grader, "keep": r["keep"], "limit": r.get("limit")}},
    )


def _register(ctx: JobContext, s: Session, run: Run, key: str, name: str) -> Any:
    """Register the JSONL at blob ``key`` as the next version of ``name``, with
    ``metadata.curation`` (the curation, the pinned source and judge)."""

    r = run.resolved
    limits = ctx.deployment().limits
    lineage = {"curation": run.id, "source": r["source"], "judge": r["grader"]["judge"]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "examples.jsonl"
        path.write_bytes(ctx.store.get_bytes(key))
        rv, _created = register_dataset(
            s, ctx.store, name, path, limits=limits, project=run.project,
            source=f"curation {run.id[:8]}", lineage=lineage, origin="curation",
        )  # fmt: skip
    return rv


def _completed(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> None:
    """Register the judge's dataset, then (unless too many rows failed or none was kept)
    the kept rows; end the attempt."""
    res = dict(event.get("result") or {})
    r = run.resolved
    judged = _register(ctx, s, run, res["judgeKey"], r["judgeDataset"])
    outputs: dict[str, Any] = {"judgeDataset": judged.pinned, "dataset": None}
    run.current_step = run.total_steps or run.current_step or 0
    share = r.get("maxErrorShare", 0.5)
    if res["count"] and res["errors"] / res["count"] > share:
        reason = (
            f"The judge could not score {res['errors']} of {res['count']} rows (more than "
            f"{share:.0%}); {judged.pinned} holds each row's error."
        )
    elif not res["kept"]:
        best = res.get("mean")
        reason = (
            f"No row met the keep rule {json.dumps(r['keep'])} (mean score "
            f"{best if best is None else round(best, 4)}); {judged.pinned} holds every row's "
            "score."
        )
    else:
        kept = _register(ctx, s, run, res["keptKey"], r["dataset"])
        outputs["dataset"] = kept.pinned
        reason = None
    run.results = {**(run.results or {}), **res, **outputs, "stage": "registered"}
    end_attempt(run, att, S.FAILED if reason else S.SUCCEEDED, reason)


CURATION = JobKind(
    name=METHOD,
    worker="akka_optimize.evals.curation.judging:curate",
    build_spec=build_spec,
    events={"progress": record_progress, "completed": _completed},
)
"""The curation kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""


def curation_view(s: Session, run: Run) -> dict[str, Any]:
    """The API record of a curation (``GET /v1/training/curations/ID``)."""
    r = run.resolved or {}
    res = run.results or {}
    g = r.get("grader") or {}
    return {
        "id": run.id,
        **project_fields(s, run.project),
        "state": run.state,
        "phase": run.phase_detail,
        "queueReason": run.queue_reason if run.state == S.QUEUED else None,
        "source": r.get("source"),
        "dataset": r.get("dataset"),
        "judgeDataset": r.get("judgeDataset"),
        "judge": g.get("judge"),
        "judgeModel": g.get("judgeModel"),
        "judgeInstructions": r.get("judgeInstructions"),
        "instructionsSource": r.get("instructionsSource"),
        "judgeEndpoint": res.get("judgeEndpoint"),
        "keep": r.get("keep"),
        "limit": r.get("limit"),
        "claims": r.get("claims"),
        "progress": {"completed": run.current_step or 0, "total": run.total_steps or 0},
        "results": {k: res.get(k) for k in ("count", "scored", "errors", "kept", "mean", "stderr")}
        if "count" in res
        else None,
        "outputs": {"dataset": res.get("dataset"), "judgeDataset": res.get("judgeDataset")}
        if "judgeDataset" in res
        else None,
        "failureReason": run.failure_reason,
        "createdAt": iso_time(run.created_at),
        "startedAt": iso_time(run.started_at),
        "finishedAt": iso_time(run.finished_at),
    }
