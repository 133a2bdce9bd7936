"""The checks of a curation request and of an evaluation (or comparison)
request for a caller: the routes and a pipeline's stages call the same function.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest
from ..evals import kind as evals
from ..evals.curation import kind as curation
from ..evals.settings import grader_text
from ..refs import parse_ref
from .access import rules as access
from .context import ServiceContext


def check_request(
    body: dict[str, Any], s: Any, ctx: ServiceContext, principal: Any, action: str
) -> dict[str, Any]:
    """A curation request checked for ``principal``: its project, the output's namespace
    (a project token writes only its own) and :func:`akka_optimize.evals.curation.kind.check_curation`.
    A pipeline's curate stage is checked by this same function.

    Raises:
        InvalidRequest / NotFound / Forbidden: refused, the field named; nothing is created.
    """

    access.check_project_key_write(principal, s, body["project"], action)
    project = access.find_project(s, body["project"], principal)
    access.check_project_write(principal, project.name, action)
    if isinstance(body.get("dataset"), str) and body["dataset"].strip():
        out = parse_ref(body["dataset"], project.name, field="dataset")
        access.check_namespace_write(principal, out.namespace, action, field="dataset")

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return access.resolve(principal, s, kind, ref, project.name, field=field)

    return curation.check_curation(ctx, s, body, project.name, resolve)


def prepare(
    body: Any, s: Any, ctx: ServiceContext, principal: Any, action: str, baseline: str | None = None
) -> tuple[evals.EvalRequest, Any]:
    """The request of an evaluation (or, with ``baseline``, a comparison) and the
    ``resolve`` over the registry versions its project sees; refuses, naming the field, a
    model of another project, a base model without a project, and a baseline on another
    base model (both sides answer on one engine)."""
    project = None
    if body.project:
        access.check_project_key_write(principal, s, body.project, action)
        project = access.find_project(s, body.project, principal)
    model = access.resolve(
        principal, s, "model", body.modelId, project.name if project else None, field="modelId"
    )
    work = "an evaluation of project {project} scores"
    project = access.project_of_model(principal, s, model, project, action, work=work)
    access.check_project_write(principal, project.name, action)
    base_key = evals.base_key_of(model)
    other = None
    if baseline is not None:
        other = access.resolve(
            principal, s, "model", baseline, project.name, field="baselineModelId"
        )
        if other.source == "adapter" and other.namespace != project.name:
            raise access.refusal(
                action,
                f"{other.repo} is a model of project {other.namespace!r}; a comparison of "
                f"project {project.name!r} scores only that project's models and base models",
                field="baselineModelId",
            )
        if evals.base_key_of(other) != base_key:
            raise InvalidRequest(
                f"baselineModelId {other.repo}:v{other.version} runs on {evals.base_key_of(other)} and "
                f"modelId on {base_key}; a comparison answers with both models on one engine, "
                "so both must be that base model or its adapters.",
                field="baselineModelId",
            )
        if other.pinned == model.pinned:
            raise InvalidRequest(
                "baselineModelId names the same version as modelId; compare two versions.",
                field="baselineModelId",
            )

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return access.resolve(principal, s, kind, ref, project.name, field=field)

    dataset, grader, sampling = body.dataset, body.grader, body.sampling.model_dump()
    instructions = body.graderInstructions
    if dataset is None or grader is None:
        cfg = project.evaluation
        if not cfg:
            missing = "dataset" if dataset is None else "grader"
            raise InvalidRequest(
                f"{missing}: required, since project {project.name!r} has no evaluation "
                f"settings to take it from (`training projects set-evaluation {project.name}`).",
                field=missing,
            )
        dataset = dataset or cfg["dataset"]
        if grader is None:
            grader = grader_text(cfg)
            if instructions is None:
                instructions = cfg.get("graderInstructions")
        # the settings' sampling, with what the request states on top
        sampling = {**(cfg.get("sampling") or {}), **body.sampling.model_dump(exclude_unset=True)}

    req = evals.EvalRequest(
        project=project.name,
        model=model,
        base_key=base_key,
        dataset=dataset,
        grader=grader,
        grader_instructions=instructions,
        sampling=sampling,
        limit=body.limit,
        raw=body.model_dump(exclude_none=True),
        device_kind=evals.eval_device_kind(ctx.settings),
        baseline=other,
    )
    return req, resolve
