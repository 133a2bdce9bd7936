"""The grader and dataset an evaluation scores with, resolved and checked at acceptance.

:func:`check_scoring` is the one rule an evaluation, a comparison and a project's
evaluation settings accept a grader and a dataset by: a bundle whose module and function
resolve, or a ``model:`` judge whose endpoint could serve (:func:`_check_judge`), and a
dataset whose rows carry the ground truth. :class:`Scoring` is what it settles;
:func:`base_key_of` names the base model a model version runs on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ..catalog.cache import ready_model_dir
from ..errors import AkkaError, InvalidRequest
from ..jobs.context import JobContext
from ..jobs.readable import check_readable
from ..refs import parse_ref
from ..registry import load_dataset_rows
from ..store import content_key
from .graders.judges import judge_instructions
from .graders.spec import check_bundle_entry, parse_grader
from .rows import eval_rows


def _bundle_sources(store: Any, rv: Any) -> dict[str, bytes]:
    """The Python files of a bundle version (path → bytes), for the submit-time check."""
    out: dict[str, bytes] = {}
    for rel, info in (rv.files or {}).items():
        if rel.endswith(".py"):
            out[rel] = store.get_bytes(content_key(info["digest"].removeprefix("sha256:")))
    return out


@dataclass(frozen=True)
class Scoring:
    """A checked grader and dataset: what an evaluation or a project's settings score with.

    Attributes:
        bundle: the pinned scoring bundle version (:class:`akka_optimize.registry.ResolvedVersion`);
            None for a ``model:`` judge.
        spec: the parsed grader (:class:`akka_optimize.evals.graders.spec.GraderSpec`).
        dataset: the pinned dataset version.
        rows: the dataset's rows (the first ``limit`` when one is given).
        judge: the pinned judge model version of a ``model:`` grader, else None.
        instructions / source: the judge's instructions and where they came from
            (:func:`akka_optimize.evals.graders.judges.judge_instructions`); None for a bundle.
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


def check_judge(ctx: JobContext, s: Session, judge: Any, grader: str) -> None:
    """Refuse (field ``grader``) a judge its endpoint could not serve: a base model that is
    not ready, an adapter above the serving rank limit."""

    try:
        ready_model_dir(s, ctx.settings, base_key_of(judge))
    except AkkaError as exc:
        raise InvalidRequest(
            f"grader {grader!r}: the judge's base model cannot serve: {exc.message}",
            field="grader",
            code=getattr(exc, "code", None) or "judge_not_ready",
        ) from exc
    if judge.source == "adapter":
        limit = ctx.deployment().serving.maxLoraRank
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
    ctx: JobContext,
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
    (:func:`akka_optimize.evals.graders.judges.judge_instructions`), so the record shows them.

    Raises:
        InvalidRequest: (field ``grader``) a bundle module or function that does not
            resolve, a judge whose base model is not ready or whose rank an endpoint does
            not load; (``graderInstructions``) instructions beside a bundle grader, which
            does not read them; (``dataset``) a dataset without rows or a row without the
            ground truth a grader needs (the row named).
        NotFound: a bundle, judge or dataset reference that does not resolve.
    """

    spec = parse_grader(grader, field="grader")
    bundle = judge = None
    if spec.kind == "model":
        judge = resolve("model", spec.ref, field="grader")
        check_judge(ctx, s, judge, grader)
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

    if model.source == "adapter":
        b = parse_ref(model.base_model or "")
        return f"{b.repo}:v{b.version}" if b.version else b.repo
    return f"{model.repo}:v{model.version}"
