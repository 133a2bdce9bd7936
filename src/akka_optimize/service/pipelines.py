"""Pipelines: a descriptor of ordered stages — curate, train, evaluate — run one after
another as jobs (seeds/001 "The trainer documentation describes every field in run and
pipeline descriptors", "Every run and every pipeline train stage names its baseModel";
FEATURES F003, F022; issue 19 item 2).

**The descriptor**::

    {"kind": "pipeline", "project": "demo", "submissionId": "nightly-1",
     "stages": [
       {"kind": "curate", "name": "curate", "source": "demo/raw", "judge": "model:…",
        "keep": {"minScore": 0.6}, "dataset": "demo/curated"},
       {"kind": "train", "name": "train", "baseModel": "…", "modelName": "…",
        "config": {"method": "sft", "dataset": "stage:curate", …}, "execution": {…}},
       {"kind": "evaluate", "name": "evaluate", "modelId": "stage:train",
        "dataset": "demo/test", "grader": "bundle:demo/scoring#reward", "limit": 50}]}

- A **curate** stage takes the fields of ``POST /v1/training/curations`` but ``project``;
  a **train** stage the fields of a run descriptor but ``kind``, ``project`` and
  ``submissionId`` (``baseModel`` is required); an **evaluate** stage the fields of
  ``POST /v1/training/evaluations`` but ``project``. ``name`` defaults to the stage's
  kind and is unique in the pipeline.
- ``stage:NAME`` names an earlier stage's output: a curate stage's registered dataset
  (in a train stage's ``config.dataset`` or ``config.validationDataset``, an evaluate
  stage's ``dataset``, a curate stage's ``source``) or a train stage's registered model
  (an evaluate stage's ``modelId``).

**At submit** the whole descriptor is checked, every stage by the function that checks
its standalone form (:func:`akka_optimize.service.plans.dry_run`, the curations route's
:func:`~akka_optimize.service.routers.curations.check_request`, the evaluations route's
``prepare`` and :func:`akka_optimize.evals.kind.check_scoring`), so the messages are the
same, prefixed with the stage (``stages[1] (train): baseModel: …``, field
``stages[1].baseModel``). An output that does not exist yet is checked through a stand-in:
a curate stage's output by its source (the curated rows are a subset of it), a train
stage's model by its base model. A refused descriptor creates nothing. The dry run
(``?dryRun=true``) answers every stage's resolved settings.

**Running**: stages run in order, each as the job its standalone form starts (a
curation, a run, an evaluation), through the scheduler. Each stage is started, with the
earlier outputs in place of ``stage:NAME``, when the one before it succeeded; a stage
that fails, is cancelled or cannot start ends the pipeline ``FAILED`` (``CANCELLED``)
with that stage's sentence. ``resume`` starts a failed or cancelled pipeline again from
its first unfinished stage (a new job for it; earlier stages keep their outputs).

**Identity**: a pipeline's ``configHash`` is the SHA-256 of its project and every
stage's resolved settings at submit; each stage keeps its own ``configHash`` and, once
started, its job's. A ``submissionId`` that the project already used returns that
pipeline (the rule of runs), so a descriptor submitted twice is recognised.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Pipeline, Run
from ..errors import AkkaError, Conflict, InvalidRequest, NotFound
from ..jobs import states as S
from ..plan.pipeline import PipelinePlan, stage_fields
from . import access

log = logging.getLogger("akka_optimize.pipelines")

STAGE_KINDS = ("curate", "train", "evaluate")
"""The kinds of stage a pipeline holds."""

MAX_STAGES = 16
"""Most stages one pipeline holds."""

TOP_FIELDS = tuple(PipelinePlan.model_fields)
"""The fields of a pipeline descriptor."""

REF_PREFIX = "stage:"
"""``stage:NAME`` names an earlier stage's output."""

_REF_SLOTS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "curate": [(("source",), "dataset")],
    "train": [(("config", "dataset"), "dataset"), (("config", "validationDataset"), "dataset")],
    "evaluate": [(("modelId",), "model"), (("dataset",), "dataset")],
}
"""Where each kind of stage may name an earlier output, and which kind of output."""

_OUTPUT = {"curate": "dataset", "train": "model", "evaluate": None}

ACTIVE = (S.QUEUED, S.PREPARING, S.RUNNING, S.PAUSED)
"""Job states in which a stage is still under way (a paused run may resume)."""


def _refuse(message: str, field: str, code: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, field=field, code=code or "pipeline_refused")


def _in_stage(exc: AkkaError, i: int, name: str) -> AkkaError:
    """``exc`` as stage ``i``'s refusal: message prefixed ``stages[i] (name):``, field
    ``stages[i].FIELD``, the same class, code and status."""
    where = f"stages[{i}]"
    field = f"{where}.{exc.field}" if exc.field else where
    details = exc.details
    if isinstance(details, list):
        details = [
            {**d, "field": f"{where}.{d['field']}" if d.get("field") else where}
            if isinstance(d, dict)
            else d
            for d in details
        ]
    out = type(exc).__new__(type(exc))
    AkkaError.__init__(
        out,
        f"{where} ({name}): {exc.message}",
        code=exc.code,
        field=field,
        status=exc.status,
        details=details,
    )
    return out


def _get(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)  # type: ignore[assignment]
    return d


def _set(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value


def _shape(raw: Any) -> tuple[str, list[dict[str, Any]], str | None]:
    """The descriptor's project, stages (with their names filled) and submissionId.

    Raises:
        InvalidRequest: the field named: not an object, ``kind`` not ``pipeline``, an
            unknown field, no ``project``, ``stages`` not a non-empty list of objects,
            a stage kind that does not exist, a field its kind does not take, a duplicate
            name.
    """
    if not isinstance(raw, dict):
        raise _refuse("A pipeline descriptor is a JSON object.", "body")
    if raw.get("kind") != "pipeline":
        raise _refuse(
            f'kind {raw.get("kind")!r}: a pipeline descriptor has "kind": "pipeline".', "kind"
        )
    for key in raw:
        if key not in TOP_FIELDS:
            raise _refuse(
                f"{key}: not a pipeline field (the fields are: {', '.join(TOP_FIELDS)}).", key
            )
    project = raw.get("project")
    if not isinstance(project, str) or not project.strip():
        raise _refuse("project: required; the training project the pipeline runs in.", "project")
    sub = raw.get("submissionId")
    if sub is not None and (not isinstance(sub, str) or not 1 <= len(sub) <= 128):
        raise _refuse("submissionId: a string of 1 to 128 characters.", "submissionId")
    stages = raw.get("stages")
    if not isinstance(stages, list) or not stages:
        raise _refuse("stages: required, a list of curate, train and evaluate stages.", "stages")
    if len(stages) > MAX_STAGES:
        raise _refuse(
            f"stages: {len(stages)} stages; a pipeline holds at most {MAX_STAGES}.", "stages"
        )
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, st in enumerate(stages):
        where = f"stages[{i}]"
        if not isinstance(st, dict):
            raise _refuse(f"{where}: a stage is an object with a kind.", where)
        kind = st.get("kind")
        if kind not in STAGE_KINDS:
            raise _refuse(
                f"{where}.kind {kind!r}: a stage is one of {', '.join(STAGE_KINDS)}.",
                f"{where}.kind",
            )
        for key in st:
            if key not in stage_fields(kind):
                raise _refuse(
                    f"{where} ({kind}): {key} is not a field of a {kind} stage (its fields: "
                    f"{', '.join(stage_fields(kind))}).",
                    f"{where}.{key}",
                )
        name = st.get("name", kind)
        if not isinstance(name, str) or not name.strip():
            raise _refuse(f"{where}.name: a non-empty string.", f"{where}.name")
        if name in names:
            raise _refuse(
                f"{where}.name {name!r}: an earlier stage has this name; give each stage a "
                "name of its own.",
                f"{where}.name",
            )
        names.add(name)
        out.append({**copy.deepcopy(st), "name": name})
    return project.strip(), out, sub


def _references(stages: list[dict[str, Any]]) -> list[dict[str, tuple[str, ...]]]:
    """For each stage, ``{slot path: the earlier stage index it names}``.

    Raises:
        InvalidRequest: ``stage:NAME`` of no earlier stage, or of one whose output is not
            what the slot takes (a dataset where a model goes).
    """
    index = {st["name"]: i for i, st in enumerate(stages)}
    found: list[dict[str, Any]] = []
    for i, st in enumerate(stages):
        refs: dict[tuple[str, ...], int] = {}
        for path, want in _REF_SLOTS[st["kind"]]:
            value = _get(st, path)
            if not (isinstance(value, str) and value.startswith(REF_PREFIX)):
                continue
            target = value[len(REF_PREFIX) :]
            field = f"stages[{i}].{'.'.join(path)}"
            j = index.get(target)
            if j is None or j >= i:
                raise _refuse(
                    f"{field} {value!r}: names no earlier stage (a stage may name the output of "
                    "a stage before it).",
                    field,
                )
            if _OUTPUT[stages[j]["kind"]] != want:
                got = _OUTPUT[stages[j]["kind"]] or "no output"
                raise _refuse(
                    f"{field} {value!r}: stage {target!r} ({stages[j]['kind']}) outputs "
                    f"{'a ' + got if got != 'no output' else got}, and {'.'.join(path)} takes "
                    f"a {want}.",
                    field,
                )
            refs[path] = j
        found.append(refs)
    return found


def _fill(st: dict[str, Any], refs: dict[tuple[str, ...], int], values: list[Any]) -> dict:
    """A copy of stage ``st`` with each ``stage:NAME`` replaced by ``values[j]``."""
    out = copy.deepcopy(st)
    for path, j in refs.items():
        _set(out, path, values[j])
    return out


def _curate_body(st: dict[str, Any], project: str) -> dict[str, Any]:
    return {
        **{k: v for k, v in st.items() if k not in ("kind", "name")},
        "project": project,
    }


def _train_plan(st: dict[str, Any], project: str) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": project,
        **{k: v for k, v in st.items() if k not in ("kind", "name")},
    }


def _check_stage(
    ctx: Any, s: Session, principal: Any, st: dict[str, Any], project: str, *, start: bool
) -> dict[str, Any]:
    """Check (``start=False``: the dry run's check) or start (``start=True``) one stage
    whose references are filled in, by its standalone form's function. Returns
    ``{"settings", "configHash"}``, and ``job`` (its job's ID) when started."""
    kind = st["kind"]
    if kind == "curate":
        from ..evals import curation
        from ..evals.kind import eval_device_kind
        from .routers.curations import check_request

        body = _curate_body(st, project)
        settings = check_request(body, s, ctx, principal, "curations.create")
        out: dict[str, Any] = {"settings": settings, "configHash": _hash(settings)}
        if start:
            view = curation.start_curation(ctx, s, settings, body, eval_device_kind(ctx.settings))
            out["job"] = view["id"]
        return out
    if kind == "train":
        from ..jobs.admission import admit
        from .plans import resolve_run_plan

        if not st.get("baseModel"):
            raise InvalidRequest(
                "baseModel: required; every pipeline train stage names its base model (a "
                "hub repository the deployment's catalog allows), as a run descriptor does.",
                field="baseModel",
                code="plan_refused",
            )
        if st.get("smoke"):
            raise InvalidRequest(
                "smoke: a smoke run registers no model, so it cannot be a pipeline's train "
                "stage; check the plan with `training runs start` and smoke: true first.",
                field="smoke",
                code="plan_refused",
            )
        plan = _train_plan(st, project)
        if start:
            from ..jobs.supervised import start_run

            resolved = resolve_run_plan(ctx, s, plan, principal)
            view = start_run(ctx, s, resolved, principal)
            return {
                "settings": resolved.plan,
                "configHash": resolved.config_hash,
                "job": view["id"],
            }
        resolved = resolve_run_plan(ctx, s, plan, principal)
        admit(ctx, s, resolved)  # the refusals the run's own dry run reports first
        return {"settings": resolved.plan, "configHash": resolved.config_hash}
    from ..evals import kind as evals
    from .routers.evaluations import EvaluationCreate, prepare

    body = {k: v for k, v in st.items() if k not in ("kind", "name")}
    try:
        model = EvaluationCreate(**body, project=project)
    except Exception as exc:  # pydantic: the field and what is wrong with it
        errors = getattr(exc, "errors", lambda: [])()
        field = ".".join(str(x) for x in errors[0]["loc"]) if errors else None
        message = errors[0]["msg"] if errors else str(exc)
        raise InvalidRequest(f"{field}: {message}.", field=field) from None
    req, resolve = prepare(model, s, ctx, principal, "evaluations.create")
    if start:
        view = evals.start_evaluation(ctx, s, req, resolve)
        run = s.get(Run, view["id"])
        assert run is not None
        return {"settings": run.resolved, "configHash": run.config_hash, "job": run.id}
    settings = evals._resolved(ctx, s, req, resolve)
    return {"settings": settings, "configHash": _hash(settings)}


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _stand_in(ctx: Any, s: Session, principal: Any, stages: list[dict[str, Any]],
              checked: list[dict[str, Any]], j: int, project: str) -> Any:  # fmt: skip
    """What stands for stage ``j``'s output while the pipeline is checked: a curate
    stage's source (pinned), a train stage's base model (its registry reference)."""
    if stages[j]["kind"] == "curate":
        return checked[j]["settings"]["source"]
    base = stages[j]["baseModel"]
    rv = access.resolve(principal, s, "model", base, project, field="baseModel")
    return rv.pinned


def check_pipeline(
    ctx: Any, s: Session, raw: Any, principal: Any
) -> tuple[str, list[dict[str, Any]], str | None, list[dict[str, Any]]]:
    """Check a whole descriptor (module docstring); nothing is created.

    Returns:
        ``(project, stages, submissionId, checked)``: ``checked[i]`` holds stage ``i``'s
        resolved ``settings`` and ``configHash`` (with stand-ins for earlier outputs).

    Raises:
        AkkaError: the first refusal, of the descriptor or of a stage (prefixed
            ``stages[i] (NAME):``, field ``stages[i].FIELD``).
    """
    project, stages, sub = _shape(raw)
    access.check_project_key_write(principal, s, project, "pipelines.start")
    project = access.find_project(s, project, principal).name
    access.check_project_write(principal, project, "pipelines.start")
    refs = _references(stages)
    checked: list[dict[str, Any]] = []
    for i, st in enumerate(stages):
        try:
            stand = {
                j: _stand_in(ctx, s, principal, stages, checked, j, project)
                for j in set(refs[i].values())
            }
            filled = _fill(st, refs[i], [stand.get(j) for j in range(len(stages))])
            checked.append(_check_stage(ctx, s, principal, filled, project, start=False))
        except AkkaError as exc:
            raise _in_stage(exc, i, st["name"]) from None
    return project, stages, sub, checked


def _stage_records(stages: list[dict[str, Any]], checked: list[dict[str, Any]]) -> list[dict]:
    return [
        {
            "index": i,
            "name": st["name"],
            "kind": st["kind"],
            "state": "PENDING",
            "job": None,
            "jobConfigHash": None,
            "earlierJobs": [],
            "output": None,
            "configHash": c["configHash"],
            "settings": c["settings"],
            "descriptor": st,
            "failureReason": None,
        }
        for i, (st, c) in enumerate(zip(stages, checked, strict=True))
    ]


def dry_run_pipeline(ctx: Any, s: Session, raw: Any, principal: Any) -> dict[str, Any]:
    """The dry run of a descriptor: every stage's resolved settings; creates nothing.

    Raises:
        AkkaError: the refusal the start would give.
    """
    project, stages, sub, checked = check_pipeline(ctx, s, raw, principal)
    records = _stage_records(stages, checked)
    return {
        "accepted": True,
        "project": project,
        "submissionId": sub,
        "configHash": _pipeline_hash(project, records),
        "stages": [
            {k: r[k] for k in ("index", "name", "kind", "configHash", "settings")} for r in records
        ],
    }


def _pipeline_hash(project: str, records: list[dict[str, Any]]) -> str:
    return _hash({"project": project, "stages": [r["settings"] for r in records]})


def start_pipeline(ctx: Any, s: Session, raw: Any, principal: Any) -> dict[str, Any]:
    """Check and record a pipeline; the scheduler's pass starts its first stage.

    A ``submissionId`` the project already used returns that pipeline.

    Raises:
        AkkaError: the descriptor is refused (:func:`check_pipeline`); nothing is created.
    """
    from ..jobs.scheduler import wake

    project, stages, sub, checked = check_pipeline(ctx, s, raw, principal)
    if sub:
        existing = s.scalar(
            select(Pipeline).where(Pipeline.project == project, Pipeline.submission_id == sub)
        )
        if existing is not None:
            return pipeline_view(s, existing)
    records = _stage_records(stages, checked)
    p = Pipeline(
        id=uuid.uuid4().hex[:16],
        project=project,
        submission_id=sub,
        state=S.RUNNING,
        descriptor=raw,
        stages=records,
        config_hash=_pipeline_hash(project, records),
    )
    try:
        with s.begin_nested():
            s.add(p)
            s.flush()
    except IntegrityError:
        existing = s.scalar(
            select(Pipeline).where(Pipeline.project == project, Pipeline.submission_id == sub)
        )
        if existing is None:
            raise Conflict("A concurrent request created this pipeline; retry.") from None
        return pipeline_view(s, existing)
    wake(ctx)
    return pipeline_view(s, p)


def _output(run: Run, kind: str) -> Any:
    if kind == "curate":
        return (run.results or {}).get("dataset")
    if kind == "train":
        return run.registered_model
    res = run.results or {}
    return {"mean": res.get("mean"), "stderr": res.get("stderr"), "count": res.get("count")}


def advance(ctx: Any, s: Session, p: Pipeline) -> None:
    """Move pipeline ``p`` on: note its current stage's job state; when that job
    succeeded, record its output and start the next stage; end the pipeline when a stage
    failed, was cancelled or could not start, or when every stage succeeded."""
    records = copy.deepcopy(p.stages)
    try:
        for rec in records:
            if rec["state"] == S.SUCCEEDED:
                continue
            if rec["job"] is None:
                outputs = [r["output"] for r in records]
                refs = _references([r["descriptor"] for r in records])[rec["index"]]
                filled = _fill(rec["descriptor"], refs, outputs)
                try:
                    with s.begin_nested():
                        got = _check_stage(ctx, s, None, filled, p.project, start=True)
                except AkkaError as exc:
                    rec["state"] = S.FAILED
                    rec["failureReason"] = exc.message
                    _end(
                        p,
                        S.FAILED,
                        f"Stage {rec['name']} ({rec['kind']}) could not start: {exc.message}",
                    )
                    return
                rec.update(job=got["job"], jobConfigHash=got["configHash"], state=S.QUEUED)
                return
            run = s.get(Run, rec["job"])
            if run is None:
                rec["state"] = S.FAILED
                _end(
                    p,
                    S.FAILED,
                    f"Stage {rec['name']} ({rec['kind']}): its job {rec['job']} is gone.",
                )
                return
            rec["state"] = run.state
            if run.state in ACTIVE:
                return
            if run.state != S.SUCCEEDED:
                rec["failureReason"] = run.failure_reason
                why = f": {run.failure_reason}" if run.failure_reason else "."
                state = S.CANCELLED if run.state == S.CANCELLED else S.FAILED
                _end(p, state, f"Stage {rec['name']} ({rec['kind']}) ended {run.state}{why}")
                return
            rec["output"] = _output(run, rec["kind"])
        _end(p, S.SUCCEEDED, None)
    finally:
        p.stages = records


def _end(p: Pipeline, state: str, reason: str | None) -> None:
    p.state = state
    p.failure_reason = reason
    p.finished_at = utcnow()


def advance_all(ctx: Any) -> None:
    """The scheduler's pass over running pipelines (:func:`akka_optimize.jobs.scheduler.on_tick`);
    each pipeline in its own transaction, so one that fails to move does not stop the others."""
    with ctx.db.session() as s:
        ids = list(s.scalars(select(Pipeline.id).where(Pipeline.state == S.RUNNING)))
    for pid in ids:
        try:
            with ctx.db.session() as s:
                p = s.get(Pipeline, pid)
                if p is not None and p.state == S.RUNNING:
                    advance(ctx, s, p)
        except Exception:
            log.exception("pipeline %s could not advance", pid)


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


def cancel_pipeline(ctx: Any, s: Session, p: Pipeline) -> None:
    """Cancel a running pipeline: its current stage's job is cancelled, the pipeline ends
    ``CANCELLED`` at once (``resume`` starts it again from that stage).

    Raises:
        Conflict: the pipeline has already ended.
    """
    from ..jobs import control

    if p.state != S.RUNNING:
        raise Conflict(f"Pipeline {p.id} has already ended {p.state}.", field="pipeline")
    records = copy.deepcopy(p.stages)
    for rec in records:
        if rec["job"] and rec["state"] not in S.TERMINAL:
            run = s.get(Run, rec["job"])
            if run is not None and run.state not in S.TERMINAL:
                control.request_control(ctx, s, run, "cancel")
            rec["state"] = S.CANCELLED
    p.stages = records
    _end(p, S.CANCELLED, "Cancelled on request.")


def resume_pipeline(ctx: Any, s: Session, p: Pipeline) -> None:
    """Start a failed or cancelled pipeline again from its first unfinished stage: that
    stage gets a new job (its earlier one is kept in ``earlierJobs``).

    Raises:
        Conflict: the pipeline is running or has succeeded.
    """
    from ..jobs.scheduler import wake

    if p.state not in (S.FAILED, S.CANCELLED):
        raise Conflict(
            f"Pipeline {p.id} is {p.state}; only a failed or cancelled pipeline resumes.",
            field="pipeline",
        )
    records = copy.deepcopy(p.stages)
    for rec in records:
        if rec["state"] == S.SUCCEEDED:
            continue
        if rec["job"]:
            rec["earlierJobs"] = [*rec.get("earlierJobs", []), rec["job"]]
        rec.update(job=None, jobConfigHash=None, state="PENDING", failureReason=None)
    p.stages = records
    p.state, p.failure_reason, p.finished_at = S.RUNNING, None, None
    wake(ctx)


def _iso(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def pipeline_view(s: Session, p: Pipeline, *, settings: bool = True) -> dict[str, Any]:
    """The API record of a pipeline (``GET /v1/training/pipelines/ID``): its state, the
    configuration it ran (``configHash``) and every stage: name, kind, state, job, output,
    its own ``configHash`` (and its job's) and, with ``settings``, its resolved settings."""
    from ..jobs.views import project_fields

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
