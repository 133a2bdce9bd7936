"""Plan resolution on the service side: the :class:`PlanEnvironment` over the database,
the registry and the catalog, and the dry run.

DESIGN.md "One picture": a plan is resolved (defaults, references pinned, ceilings
checked) before anything is queued; :mod:`akka_optimize.plan` does the work and this
module supplies the world it resolves against.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..catalog import load_catalog
from ..data.policy import LossPolicy
from ..db.models.projects import Project
from ..deployment import Deployment, cuda_available
from ..errors import AkkaError
from ..jobs.branches import branch_origin, branch_settings
from ..jobs.warmstart import warm_start_source
from ..plan import CatalogEntryView, ResolvedPlan, resolve_plan
from ..plan.dryrun import dry_run_report
from ..plan.hashing import config_hash
from ..registry import dataset_rows_view, is_prepared, resolve
from ..testhooks import hold
from .access import rules as access
from .auth import Principal
from .context import ServiceContext

_VARIANT = re.compile(r"(?:^|[-_])(E\d+B|\d+(?:\.\d+)?[BM])(?:$|[-_])", re.IGNORECASE)


def deployment_for(ctx: ServiceContext) -> Deployment:
    """The deployment file in force for this service (re-read when it changes on disk)."""
    return ctx.deployment()


def variant_of(repository: str) -> str | None:
    """The size named in a repository (``google/gemma-4-E4B-it`` → ``E4B``), or None."""
    m = _VARIANT.search(repository.rsplit("/", 1)[-1])
    return m.group(1).upper() if m else None


def catalog_view(entry: Any) -> CatalogEntryView:
    """Adapt a :class:`akka_optimize.catalog.CatalogEntry` to what plan rules read."""
    return CatalogEntryView(
        repository=entry.repository,
        family=entry.family,
        variant=variant_of(entry.repository),
        max_context_tokens=getattr(entry, "max_context_tokens", None),
        qualified_tokens={
            name: env.qualified_tokens
            for name, env in entry.envelope.items()
            if getattr(env, "qualified_tokens", None)
        },
        measured=all(getattr(env, "measured", False) for env in entry.envelope.values()),
    )


class ServicePlanEnvironment:
    """:class:`~akka_optimize.plan.PlanEnvironment` over one database session."""

    def __init__(
        self, ctx: ServiceContext, session: Session, principal: Principal | None = None
    ) -> None:
        self.ctx = ctx
        self.session = session
        self.principal = principal
        self.deployment = deployment_for(ctx)
        self.cuda_available = cuda_available()
        self._catalog: Any = None

    def project_exists(self, name: str) -> bool:
        """Whether a training project called ``name`` exists."""
        q = select(Project.id).where(Project.name == name.lower())
        return self.session.scalar(q) is not None

    def resolve_dataset(self, ref: str, project: str) -> str:
        """Pin a dataset reference through the registry (raises NotFound/InvalidRequest)."""
        return self.resolve_artifact("dataset", ref, project)

    def resolve_artifact(self, kind: str, ref: str, project: str) -> str:
        """Pin a ``dataset``, ``model`` or ``bundle`` reference through the registry, among
        the artifacts the caller sees (a project token: its own namespace and base models)."""
        return access.resolve(self.principal, self.session, kind, ref, project).pinned

    def catalog_entry(self, repository: str) -> CatalogEntryView | None:
        """The base model's catalog entry, or None when the catalog does not allow it."""

        if self._catalog is None:
            self._catalog = load_catalog(self.deployment)
        entry = self._catalog.get(repository)
        return catalog_view(entry) if entry is not None else None


def resolve_run_plan(
    ctx: ServiceContext, session: Session, raw: Any, principal: Principal | None = None
) -> ResolvedPlan:
    """Resolve ``raw`` against this service for ``principal`` (None: the service itself).
    Raises PlanRefused (400) with every refusal,
    and InvalidRequest for a ``warmStartModelId`` or ``branchFrom`` a run could not start
    from (:mod:`akka_optimize.jobs.warmstart`, :mod:`akka_optimize.jobs.branches`), and
    Forbidden (:mod:`.access`) for a plan in another project than a project token's, or
    one that branches or warm-starts from another project.

    ``branchFrom`` names the source exactly once resolved (the full run ID and
    ``step-N``), so a dry run and the run it previews hash alike. A branch resolves against
    its source's frozen settings (F021): only what it states differs from the source's.
    """

    frozen = None
    if isinstance(raw, dict):
        access.check_project_write(principal, raw.get("project"), "runs.start")
        if isinstance(raw.get("branchFrom"), dict):
            access.check_branch(principal, session, raw)  # before its settings are read
            frozen = branch_settings(session, raw)
    resolved = resolve_plan(raw, ServicePlanEnvironment(ctx, session, principal), frozen)
    access.check_warm_start(resolved.plan)
    warm_start_source(session, ctx.store, resolved.plan)
    access.check_branch(principal, session, resolved.plan)
    origin = branch_origin(session, resolved.plan)
    if origin is not None:
        source, snap = origin
        resolved.plan["branchFrom"] = {"run": source.id, "snapshot": f"step-{snap.step}"}
        resolved.pinned["branchFrom"] = f"run {source.id} at step-{snap.step}"
        resolved.config_hash = config_hash(resolved.plan)
    return resolved


def dataset_findings(ctx: ServiceContext, session: Session, resolved: ResolvedPlan) -> Any:
    """Findings for the pinned training dataset (seeds/001: "A dry run reports dataset
    findings, such as exact and near duplicates, for the version the run would train on").

    Token findings (lengths against ``maxSeqLength``, rows that train nothing, rows the
    chat template cannot render) need the base model's tokenizer, so they appear once the
    base model is selected and READY; until then the report has the duplicate findings
    and ``tokenFindings`` says why the rest is missing.

    Prepared token rows (seeds/001 "Train prepared token rows as given") are trained as
    given: their report is the registered counts (``prepared``), and ``tokenFindings``
    says so.

    Above the findings' bound (``FINDINGS_SAMPLE_ROWS`` rows or ``FINDINGS_SAMPLE_BYTES``,
    :func:`akka_optimize.data.findings.sample`) token findings and near duplicates cover a
    seeded sample and ``sampled`` says so (issue 48 item 8): at the upload limit the dry run
    answers in seconds (README "Dataset findings").

    Returns:
        The dict of :func:`akka_optimize.data.findings.findings` (or of ``duplicates``,
        its lists cut to ``MAX_LISTED`` groups with ``*_count`` keys), with ``dataset``
        (the pinned reference) and ``tokenFindings`` (``true`` or the reason they are
        missing).
    """
    from ..data import findings as F  # lazy: numpy

    cfg = resolved.plan["config"]
    version = resolve(session, "dataset", cfg["dataset"], resolved.project)
    if is_prepared(version):
        info = version.metadata["prepared"]
        return {
            "dataset": cfg["dataset"],
            "tokenFindings": "prepared token rows are trained as given: "
            f"{info['supervisedTokens']} supervised tokens, the longest row "
            f"{info['longestRow']} tokens",
            "rows": info["rows"],
            "trainable_rows": info["rows"],
            "max_seq_length": cfg["maxSeqLength"],
            "prepared": info,
        }
    rows = dataset_rows_view(ctx.store, version)
    hold("findings")  # tests: a dry run held here while its client leaves
    numbers = range(1, len(rows) + 1)  # not a list: millions of ints at the upload limit
    reason: Any = True
    tokenizer = images = None
    if resolved.method not in ("sft", "dpo"):
        reason = "token findings are computed for supervised and preference runs"
    else:
        try:
            from ..catalog.cache import load_tokenizer, tokenizer_dir  # lazy: guarded
            from ..jobs.trainable import image_inputs  # lazy: guarded

            model = resolved.plan["baseModel"]
            folder = tokenizer_dir(session, ctx.settings, model)
            tokenizer = load_tokenizer(folder)
            images = image_inputs(ctx.store, folder, model)
        except AkkaError as exc:
            reason = f"token findings need the base model's tokenizer: {exc.message}"
    if tokenizer is not None:
        reason, out = _token_findings(tokenizer, resolved.method, cfg, rows, numbers, images)
    else:
        out = {"rows": len(rows), **F.duplicates(rows, numbers, listed=F.MAX_LISTED)}
    return {"dataset": cfg["dataset"], "tokenFindings": reason, **out}


def _token_findings(
    tokenizer: Any, method: str, cfg: dict[str, Any], rows: Any, numbers: Any, images: Any = None
) -> tuple[Any, dict[str, Any]]:
    """``(tokenFindings, findings)`` of a supervised run's rows
    (:func:`akka_optimize.data.findings.findings`) or a preference run's pairs
    (:func:`akka_optimize.data.preference.pair_findings`, with duplicates). Rows of the
    other method's shape give no token findings and say why: admission refuses them,
    naming the dataset, as the start does."""
    from ..data import findings as F  # lazy: numpy

    try:
        if method == "dpo":
            from ..data.preference import pair_findings  # lazy: guarded

            out = pair_findings(tokenizer, rows, cfg["maxSeqLength"], numbers)
            return True, out | F.duplicates(rows, numbers, listed=F.MAX_LISTED)
        loss = cfg["loss"]
        policy = LossPolicy(
            assistant_turns=loss["assistantTurns"],
            train_on_tool_calls=loss["trainOnToolCalls"],
            train_on_tool_results=loss["trainOnToolResults"],
        )
        return True, F.findings(tokenizer, rows, policy, cfg["maxSeqLength"], numbers, images)
    except AkkaError as exc:
        if method != "dpo" and exc.code != "preference_rows":
            raise
        return f"no token findings: {exc.message}", {"rows": len(rows)}


def dry_run(
    ctx: ServiceContext, session: Session, raw: Any, principal: Principal | None = None
) -> dict[str, Any]:
    """The dry-run report of ``raw``; creates nothing. Raises PlanRefused when the plan is
    refused. A plan that resolves but that a start would refuse (:mod:`akka_optimize.jobs.
    admission`) gets the report with ``accepted: false`` and ``refusals``: every such
    refusal as ``{code, field, message, status}``, the first being the start's error."""
    from ..jobs.admission import admission_refusals, refusal_entry  # lazy: torch

    resolved = resolve_run_plan(ctx, session, raw, principal)
    report = dry_run_report(resolved, dataset_findings(ctx, session, resolved))
    refused = [refusal_entry(e) for e in admission_refusals(ctx, session, resolved)]
    if refused:
        report["accepted"] = False
        report["refusals"] = refused
    return report
