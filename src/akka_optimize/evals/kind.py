"""Evaluations as jobs: the ``eval`` kind, how one is accepted, and what it reports.

An evaluation is a run record whose ``method`` is ``eval`` (:mod:`akka_optimize.jobs.kinds`):
the same scheduler, executor, states (``QUEUED`` → ``PREPARING`` → ``RUNNING`` →
``SUCCEEDED``/``FAILED``/``CANCELLED``), cancel and recovery as a training run. Its worker
(:func:`akka_optimize.evals.worker.evaluate`) answers the dataset's prompts with the serving
engine and grades the answers in the sandbox (:mod:`akka_optimize.evals.sandbox`).

:func:`start_evaluation` pins the model, dataset and bundle to exact versions at acceptance
and refuses, naming the field, whatever would fail later: a grader whose module or function
the bundle does not define, a dataset row without ground truth, a base model that is not
ready, options a bundle grader would ignore.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt
from ..errors import InvalidRequest, NotFound
from ..jobs import states as S
from ..jobs.kinds import JobKind, Launch, register_kind
from ..jobs.records import end_attempt
from ..jobs.scheduler import wake
from ..jobs.spec import JobSpec
from ..jobs.views import project_fields
from ..store import content_key
from .graders import check_bundle_entry, parse_grader

METHOD = "eval"
"""The run ``method`` of an evaluation."""

COMPARE = "compare"
"""The run ``method`` of a comparison (two models, one dataset, one grader)."""

MAX_ERROR_SHARE = 0.5
"""An evaluation whose example errors (grader raised, hung, exceeded a limit, returned a
non-number) exceed this share of its examples fails, with one sentence; below it, it
succeeds and reports the error count beside the mean."""

DEFAULT_SAMPLING = {"temperature": 0.0, "topP": 1.0, "maxTokens": 256, "seed": 0}
"""Sampling of the answers when the request leaves a setting out: greedy, 256 tokens."""


@dataclass(frozen=True)
class EvalRequest:
    """A validated ``POST /v1/training/evaluations`` body, its model already resolved.

    Attributes:
        project: the project the evaluation belongs to (the candidate's, or ``--project``).
        model: the resolved model version (:class:`akka_optimize.registry.ResolvedVersion`).
        base_key: the base model's catalog key (``ns/name:vN``) the worker loads.
        dataset / grader / grader_instructions / sampling / limit: as given.
        raw: the request body as given (kept with the record).
        device_kind: ``cpu`` or ``cuda``: where the answers are generated (the deployment's
            default device profile, else CUDA when the service's machine has it).
        baseline: a comparison's baseline model version (None for an evaluation); it
            shares the candidate's base model.
        trigger: None for a request; ``registered`` for the evaluation a project's settings
            queue when a model version is registered (:mod:`akka_optimize.evals.settings`).
    """

    project: str
    model: Any
    base_key: str
    dataset: str
    grader: str
    grader_instructions: str | None
    sampling: dict[str, Any]
    limit: int | None
    raw: dict[str, Any]
    device_kind: str = "cpu"
    baseline: Any = None
    trigger: str | None = None


def _bundle_sources(store: Any, rv: Any) -> dict[str, bytes]:
    """The Python files of a bundle version (path → bytes), for the submit-time check."""
    out: dict[str, bytes] = {}
    for rel, info in (rv.files or {}).items():
        if rel.endswith(".py"):
            out[rel] = store.get_bytes(content_key(info["digest"].removeprefix("sha256:")))
    return out


def _side(model: Any) -> dict[str, Any]:
    return {
        "modelId": model.pinned,
        "model": f"{model.repo}:v{model.version}",
        "modelSource": "adapter" if model.source == "adapter" else "base",
    }


@dataclass(frozen=True)
class Scoring:
    """A checked grader and dataset: what an evaluation or a project's settings score with.

    Attributes:
        bundle: the pinned scoring bundle version (:class:`akka_optimize.registry.ResolvedVersion`);
            None for a ``model:`` judge.
        spec: the parsed grader (:class:`akka_optimize.evals.graders.GraderSpec`).
        dataset: the pinned dataset version.
        rows: the dataset's rows (the first ``limit`` when one is given).
        judge: the pinned judge model version of a ``model:`` grader, else None.
        instructions / source: the judge's instructions and where they came from
            (:func:`akka_optimize.evals.judges.judge_instructions`); None for a bundle.
        given: ``graderInstructions`` as the request gave them (None when left out).
    """

    bundle: Any
    spec: Any
    dataset: Any
    rows: list[dict[str, Any]]
    judge: Any = None
    instructions: str | None = None
    source: str | None = None
    given: str | None = None

    def grader(self) -> dict[str, Any]:
        """The pinned grader as records keep it: a bundle's ``spec``, ``bundle``,
        ``module``, ``function``; a judge's ``spec``, ``judge`` (pinned), ``judgeModel``,
        ``judgeBase`` (catalog key) and ``judgeSource`` (``base`` or ``adapter``)."""
        if self.judge is not None:
            j = self.judge
            return {
                "spec": f"model:{j.repo}:v{j.version}",
                "judge": j.pinned,
                "judgeModel": f"{j.repo}:v{j.version}",
                "judgeBase": base_key_of(j),
                "judgeSource": "adapter" if j.source == "adapter" else "base",
            }
        b, spec = self.bundle, self.spec
        return {
            "spec": f"bundle:{b.repo}:v{b.version}#{spec.module}:{spec.function}",
            "bundle": b.pinned,
            "module": spec.module,
            "function": spec.function,
        }


def _check_judge(ctx: Any, s: Session, judge: Any, grader: str) -> None:
    """Refuse (field ``grader``) a judge its endpoint could not serve: a base model that is
    not ready, an adapter above the serving rank limit."""
    from ..catalog.cache import ready_model_dir
    from ..deployment import load_deployment
    from ..errors import AkkaError

    try:
        ready_model_dir(s, ctx.settings, base_key_of(judge))
    except AkkaError as exc:
        raise InvalidRequest(
            f"grader {grader!r}: the judge's base model cannot serve: {exc.message}",
            field="grader",
            code=getattr(exc, "code", None) or "judge_not_ready",
        ) from exc
    if judge.source == "adapter":
        limit = load_deployment(ctx.settings.resolved_deployment_file()).serving.maxLoraRank
        rank = (judge.metadata or {}).get("rank")
        if rank is not None and int(rank) > limit:
            raise InvalidRequest(
                f"grader {grader!r}: the judge {judge.repo}:v{judge.version} is an adapter of "
                f"rank {rank}, above the largest rank an endpoint of this deployment loads "
                f"({limit}; `training endpoints info`).",
                field="grader",
                code="rank_too_large",
            )


def check_scoring(
    ctx: Any,
    s: Session,
    grader: str,
    grader_instructions: str | None,
    dataset: str,
    resolve: Any,
    limit: int | None = None,
) -> Scoring:
    """Resolve and check a grader and a dataset, as an evaluation, a comparison and a
    project's evaluation settings accept them (one rule for all three).

    A ``model:REF`` judge is resolved to an exact model version (base or adapter) in the
    request's project, and its instructions are settled here
    (:func:`akka_optimize.evals.judges.judge_instructions`), so the record shows them.

    Raises:
        InvalidRequest: (field ``grader``) a bundle module or function that does not
            resolve, a judge whose base model is not ready or whose rank an endpoint does
            not load; (``graderInstructions``) instructions beside a bundle grader, which
            does not read them; (``dataset``) a dataset without rows or a row without the
            ground truth a grader needs (the row named).
        NotFound: a bundle, judge or dataset reference that does not resolve.
    """
    from ..jobs.readable import check_readable
    from ..registry import load_dataset_rows
    from .judges import judge_instructions
    from .rows import eval_rows

    spec = parse_grader(grader, field="grader")
    bundle = judge = None
    if spec.kind == "model":
        judge = resolve("model", spec.ref, field="grader")
        _check_judge(ctx, s, judge, grader)
    else:
        if grader_instructions is not None:
            raise InvalidRequest(
                "graderInstructions: instructions are for a model: judge; a bundle grader's "
                "code does not read them. Leave them out.",
                field="graderInstructions",
            )
        bundle = resolve("bundle", spec.ref, field="grader")
        where = f"{bundle.repo}:v{bundle.version}"
        check_bundle_entry(_bundle_sources(ctx.store, bundle), spec, where)
    ds = resolve("dataset", dataset, field="dataset")
    check_readable(ctx, "dataset", ds)
    if bundle is not None:
        check_readable(ctx, "grader", bundle)
    rows = load_dataset_rows(ctx.store, ds)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise InvalidRequest(f"Dataset {ds.pinned} has no rows to evaluate.", field="dataset")
    eval_rows(rows, ds.pinned, f"{ds.namespace}/{ds.name}")  # refuses a row, naming it
    text = source = None
    if judge is not None:
        text, source = judge_instructions(grader_instructions, judge, rows)
    return Scoring(
        bundle=bundle,
        spec=spec,
        dataset=ds,
        rows=rows,
        judge=judge,
        instructions=text,
        source=source,
        given=grader_instructions,
    )


def base_key_of(model: Any) -> str:
    """The catalog key (``ns/name:vN``) of the base model that ``model`` (a resolved model
    version: a base model or an adapter) runs on."""
    from ..refs import parse_ref

    if model.source == "adapter":
        b = parse_ref(model.base_model or "")
        return f"{b.repo}:v{b.version}" if b.version else b.repo
    return f"{model.repo}:v{model.version}"


def eval_device_kind(settings: Any) -> str:
    """Where answers are generated: the deployment's default device profile's kind, else
    ``cuda`` when this machine has a CUDA device, else ``cpu``."""
    from ..deployment import cuda_available, load_deployment

    dep = load_deployment(settings.resolved_deployment_file())
    prof = dep.profile(dep.defaultDeviceProfile) if dep.defaultDeviceProfile else None
    return prof.kind if prof is not None else ("cuda" if cuda_available() else "cpu")


def _resolved(ctx: Any, s: Session, req: EvalRequest, resolve: Any) -> dict[str, Any]:
    """The evaluation's pinned settings (what the worker runs and ``get`` shows)."""
    sc = check_scoring(
        ctx, s, req.grader, req.grader_instructions, req.dataset, resolve, limit=req.limit
    )
    model = req.model
    sides = [_side(model)] + ([_side(req.baseline)] if req.baseline is not None else [])
    return {
        "kind": "evaluation" if req.baseline is None else "comparison",
        "project": req.project,
        "modelId": model.pinned,
        "model": f"{model.repo}:v{model.version}",
        "modelSource": sides[0]["modelSource"],
        "sides": sides,
        "baseModel": req.base_key,
        "dataset": sc.dataset.pinned,
        "datasetRows": len(sc.rows),
        "grader": sc.grader(),
        "graderInstructions": sc.instructions,
        "instructionsSource": sc.source,
        "sampling": req.sampling,
        "limit": req.limit,
        "maxErrorShare": MAX_ERROR_SHARE,
        **({"trigger": req.trigger} if req.trigger else {}),
    }


def _claims(ctx: Any, project: str, device_kind: str, judged: bool) -> list[dict[str, Any]]:
    """The evaluation's claims (one device, and its judge endpoint when judged), as its
    record shows them; refused when no quota or pool could ever admit them (issue 22;
    :mod:`akka_optimize.jobs.capacity`).

    Raises:
        InvalidRequest: ``quota_exceeded``, naming the quota or the pool.
    """
    from ..deployment import load_deployment
    from ..jobs import capacity

    dep = load_deployment(ctx.settings.resolved_deployment_file())
    devices = capacity.run_devices(dep, None, device_kind, 0, judged)
    refused = capacity.refusal(
        dep,
        project,
        devices,
        capacity.claim_words(devices, judged),
        "grader" if judged else "model",
    )
    if refused is not None:
        raise refused
    return capacity.claim_list(dep, None, device_kind, 0, judged, "evaluation devices")


def start_evaluation(ctx: Any, s: Session, req: EvalRequest, resolve: Any) -> dict[str, Any]:
    """Record an evaluation (a comparison when ``req.baseline`` is set); it waits
    ``QUEUED`` until the scheduler starts it.

    Args:
        resolve: ``resolve(kind, ref, field=...)`` over the registry versions the caller
            sees in the evaluation's project (the service's access rules).

    Raises:
        InvalidRequest / NotFound / Forbidden / Conflict: the request is refused (the field
            named); nothing is created.
    """
    from ..catalog.cache import ready_model_dir

    ready_model_dir(s, ctx.settings, req.base_key)  # refuses a base model that is not READY
    resolved = _resolved(ctx, s, req, resolve)
    claims = _claims(ctx, req.project, req.device_kind, bool(resolved["grader"].get("judge")))
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    resolved["claims"] = claims  # not hashed: the same evaluation on another deployment
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=req.project,
        method=METHOD if req.baseline is None else COMPARE,
        state=S.QUEUED,
        plan=req.raw,
        resolved=resolved,
        config_hash=digest,
        base_model=req.base_key,
        dataset=resolved["dataset"],
        validation_dataset=None,
        model_name=resolved["model"],
        device_kind=req.device_kind,
        gpus=0,
        total_steps=resolved["datasetRows"] * len(resolved["sides"]),
        results={},
        queue_reason="waiting for the scheduler",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return evaluation_view(s, run) if req.baseline is None else comparison_view(s, run)


def _grader_spec(s: Session, r: dict[str, Any]) -> dict[str, Any]:
    """What the worker needs of the pinned grader: a bundle's record, or a judge's
    instructions (the judge itself is reached through its endpoint)."""
    from ..registry import resolve

    g = dict(r["grader"])
    if g.get("judge"):
        return {**g, "kind": "model", "instructions": r.get("graderInstructions")}
    return {**g, "kind": "bundle", "bundle": resolve(s, "bundle", g["bundle"]).to_dict()}


def sweep_sides(s: Session, r: dict[str, Any]) -> dict[str, Any]:
    """A sweep comparison's sides once its branches have ended: the source snapshot first,
    then each branch that succeeded, as its registered model; a branch that did not is
    listed in ``leftOut`` with its state.

    Raises:
        Conflict: no branch succeeded, so there is nothing to score against the source.
    """
    from ..errors import Conflict

    sides, left_out = [r["sides"][0]], []
    for b in r["branches"]:
        run = s.get(Run, b["run"])
        model = run.registered_model if run is not None else None
        if run is None or run.state != S.SUCCEEDED or not model:
            left_out.append({**b, "state": run.state if run is not None else "DELETED"})
            continue
        name = model.split("@", 1)[0]
        sides.append({**b, "modelId": model, "model": name, "modelSource": "adapter"})
    if len(sides) == 1:
        raise Conflict(
            f"None of the sweep's {len(r['branches'])} branches succeeded, so there is no "
            "model to score against the source snapshot; `training runs sweep` again.",
            field="compare",
        )
    return {"sides": sides, "leftOut": left_out}


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of an evaluation attempt (the ``eval`` kind's ``build_spec``)."""
    from ..deployment import load_deployment
    from ..registry import resolve

    s, run = launch.session, launch.run
    r = run.resolved
    g = load_deployment(launch.ctx.settings.resolved_deployment_file()).graders
    limits = {
        "cpu_seconds": g.cpuSeconds,
        "wall_seconds": g.wallSeconds,
        "memory_bytes": g.memoryMiB * 1024**2,
        "workers": g.workers,
    }
    if r.get("kind") == "sweep":
        r = run.resolved = {**r, **sweep_sides(s, r)}
        run.total_steps = r["datasetRows"] * len(r["sides"])
    sides = r.get("sides") or [r]
    ev = {
        "sides": [
            {
                "model": side["modelId"],
                "adapter": resolve(s, "model", side["modelId"]).to_dict()
                if side["modelSource"] == "adapter"
                else None,
                "adapterKey": side.get("adapterKey"),
            }
            for side in sides
        ],
        "fan": r.get("kind") == "sweep",
        "grader": _grader_spec(s, r),
        "sampling": r["sampling"],
        "limit": r["limit"],
        "limits": limits,
    }
    return launch.spec(
        dataset=resolve(s, "dataset", r["dataset"]).to_dict(),
        device="cuda" if run.device_kind == "cuda" else "cpu",
        extra={"evaluation": ev, "hidden": [str(launch.ctx.settings.home)]},
    )


def _progress(ctx: Any, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]) -> None:
    run.current_step = int(event.get("completed") or 0)
    run.total_steps = int(event.get("total") or run.total_steps or 0)
    stage = str(event.get("stage") or "")
    run.results = {**(run.results or {}), "stage": stage}


def _completed(ctx: Any, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]) -> None:
    res = dict(event.get("result") or {})
    if "fan" in res:  # a sweep's comparison: the source against every branch
        count = res["baseline"]["count"] * (1 + len(res["fan"]))
        errors = res["baseline"]["errors"] + sum(f["errors"] for f in res["fan"])
        what, cmd = "answers", "comparisons"
    elif run.method == COMPARE:
        res["mostDifferent"] = most_different(read_examples(ctx.store, run, res))
        count, errors = res.get("pairs", 0) + res.get("errors", 0), res.get("errors", 0)
        what, cmd = "example pairs", "comparisons"
    else:
        count, errors = res.get("count", 0), res.get("errors", 0)
        what, cmd = "examples", "evaluations"
    run.results = {**(run.results or {}), **res, "stage": "graded"}
    run.current_step = run.total_steps or run.current_step or 0
    if count and errors / count > MAX_ERROR_SHARE:
        end_attempt(
            run,
            att,
            S.FAILED,
            f"{errors} of {count} {what} could not be scored (more than "
            f"{MAX_ERROR_SHARE:.0%}); `training {cmd} get {run.id[:8]} --examples` shows "
            "each one's reason.",
        )
    else:
        end_attempt(run, att, S.SUCCEEDED)


EVALUATION = register_kind(
    JobKind(
        name=METHOD,
        worker="akka_optimize.evals.worker:evaluate",
        build_spec=build_spec,
        events={"progress": _progress, "completed": _completed},
    )
)
"""The evaluation kind, registered when this module is imported."""

COMPARISON = register_kind(
    JobKind(
        name=COMPARE,
        worker="akka_optimize.evals.worker:evaluate",
        build_spec=build_spec,
        events={"progress": _progress, "completed": _completed},
    )
)
"""The comparison kind: both models answer on one engine, one grader scores both."""


def _iso(t: Any) -> str | None:
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
        "createdAt": _iso(run.created_at),
        "startedAt": _iso(run.started_at),
        "finishedAt": _iso(run.finished_at),
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
