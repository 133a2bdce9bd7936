"""One pipeline stage checked or started by the function of its standalone form (a
curation, a run, an evaluation), and the settings hash a stage and a pipeline carry
(:mod:`akka_optimize.core.pipelines.records`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy.orm import Session

from ...db.models.jobs import Run
from ...errors import InvalidRequest
from ...evals import kind as evals
from ...plan.pipeline import EvaluationRequest as EvaluationCreate
from ..context import ServiceContext
from ..requests import prepare


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


def check_stage(
    ctx: ServiceContext,
    s: Session,
    principal: Any,
    st: dict[str, Any],
    project: str,
    *,
    start: bool,
) -> dict[str, Any]:
    """Check (``start=False``: the dry run's check) or start (``start=True``) one stage
    whose references are filled in, by its standalone form's function. Returns
    ``{"settings", "configHash"}``, and ``job`` (its job's ID) when started."""
    kind = st["kind"]
    if kind == "curate":
        from ...evals.curation import kind as curation  # lazy: guarded
        from ...evals.kind import eval_device_kind  # lazy: guarded
        from ..requests import check_request  # lazy: guarded

        body = _curate_body(st, project)
        settings = check_request(body, s, ctx, principal, "curations.create")
        out: dict[str, Any] = {"settings": settings, "configHash": stages_hash(settings)}
        if start:
            view = curation.start_curation(ctx, s, settings, body, eval_device_kind(ctx.settings))
            out["job"] = view["id"]
        return out
    if kind == "train":
        from ...jobs.admission import admit  # lazy: guarded
        from ..plans import resolve_run_plan  # lazy: guarded

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
            from ...jobs.supervised import start_run  # lazy: guarded

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
    settings = evals.kind_resolved(ctx, s, req, resolve)
    return {"settings": settings, "configHash": stages_hash(settings)}


def stages_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
