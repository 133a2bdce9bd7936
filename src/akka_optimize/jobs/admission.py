"""Admission: whether a resolved plan may start, decided once for the dry run and the start.

A plan that resolves (:func:`akka_optimize.core.plans.resolve_run_plan`) can still be
one this release cannot start: a method not available yet, a setting a run on several
devices cannot honour (:mod:`akka_optimize.jobs.multi_device`),
a base model nobody selected, a ``modelName`` the registry would refuse at the end of
training (F049), a branch of a run in another project, a dataset or bundle the jobs cannot
read (:mod:`akka_optimize.jobs.readable`), prepared token rows the base model or plan
cannot train, rows the worker could not train (:mod:`akka_optimize.jobs.trainable`), a
device profile resolved to devices this machine lacks, an attention implementation the
run's device cannot run, or a claim no quota or pool could
ever admit (:mod:`akka_optimize.jobs.capacity.usage`). :func:`admission_refusals`
lists every such refusal; the dry run reports them (``accepted: false``) and
:func:`admit`, which :func:`akka_optimize.jobs.service.start_run` calls before it creates
anything, raises the first. Both read the same list, so a dry run and a start give the
same ``code``, ``field`` and message (issue 16 "The dry run is the start").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..catalog.cache import load_tokenizer, ready_model_dir, tokenizer_dir
from ..data.prepared.rows import check_length, check_tokenizer
from ..engine.attention import flash_attention_device_refusal
from ..errors import AkkaError, Conflict, InvalidRequest
from ..registry import is_prepared, resolve
from ..registry.models import trained_name_refusal
from .capacity import usage as capacity
from .capacity.usage import observed_devices
from .context import JobContext
from .kinds import job_kind, registered_kinds
from .lora_targets import refuse_unmatched_targets
from .mapping import job_fields
from .multi_device import multi_device_refusal
from .readable import check_readable
from .trainable import rows_refusal


def _method(f: dict[str, Any]) -> AkkaError | None:

    if f["method"] in registered_kinds():
        return None
    return InvalidRequest(
        f"config.method {f['method']!r}: this release trains supervised (sft) runs only; "
        "set config.method to sft.",
        field="config.method",
        code="method_not_available",
    )


def _kind(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """The refusal of the kind's own ``accept`` (a reinforcement run's reward and rows)."""

    if f["method"] not in registered_kinds() or job_kind(f["method"]).accept is None:
        return None
    try:
        job_kind(f["method"]).accept(ctx, session, f)
    except AkkaError as exc:
        return exc
    return None


def accepted(ctx: JobContext, session: Session, f: dict[str, Any]) -> dict[str, Any]:
    """What the run's kind pins at acceptance (merged into its ``resolved``); ``{}`` for a
    kind without ``accept``.

    Raises:
        AkkaError: the kind refuses the plan (as :func:`admission_refusals` reports it).
    """

    kind = job_kind(f["method"])
    return kind.accept(ctx, session, f) if kind.accept is not None else {}


def _gpus(ctx: JobContext, f: dict[str, Any]) -> AkkaError | None:
    """A run on several devices with a setting it cannot honour
    (:mod:`akka_optimize.jobs.multi_device`)."""

    return multi_device_refusal(ctx, f)


def _schedulable(ctx: JobContext, f: dict[str, Any]) -> AkkaError | None:
    """A device profile the plan did not name, resolved to one whose devices this machine
    does not have (issue 47: ``execution.gpus: 2`` on a machine without a GPU resolved to
    H100 and failed in the worker). With the local executor a cuda profile is schedulable
    when this machine observes ``execution.gpus`` CUDA devices, a cpu profile when it holds
    that many per node (gloo ranks on the host); the refusal names every profile with its
    devices per node and the devices observed (as ``training capacity`` shows them). A
    stated profile is the plan's choice, and a Ray cluster's devices are not observed here.
    """

    r = f["resolved"]
    if "execution.deviceProfile" in (r.get("stated") or []):
        return None
    dep = ctx.deployment()
    prof = dep.profile(str((r.get("execution") or {}).get("deviceProfile") or ""))
    if dep.executor.kind != "local" or prof is None:
        return None
    gpus = max(1, int((r.get("execution") or {}).get("gpus") or 1))

    def fits(p: Any) -> bool:
        return p.devicesPerNode >= gpus and (p.kind == "cpu" or observed_devices(p.kind) >= gpus)

    if fits(prof):
        return None
    listed = "; ".join(
        f"{p.name} ({p.kind}): {p.devicesPerNode} per node, {observed_devices(p.kind)} observed"
        for p in dep.deviceProfiles
    )
    ok = [p.name for p in dep.deviceProfiles if fits(p)]
    devices = f"{gpus} device" + ("s" if gpus != 1 else "")
    todo = (
        f"name one that can ({', '.join(ok)}) as execution.deviceProfile"
        if ok
        else f"no device profile this deployment can schedule holds {devices}; lower execution.gpus"
    )
    return InvalidRequest(
        f"execution.gpus {gpus}: the plan names no execution.deviceProfile and resolved to "
        f"{prof.name}, of which this machine observes {observed_devices(prof.kind)}, so the "
        f"run could not start; {todo}. The device profiles: {listed}.",
        field="execution.gpus",
        code="no_schedulable_device",
    )


def _attention(f: dict[str, Any]) -> AkkaError | None:
    """``config.model.attentionImplementation`` the run's device cannot run (issue 47:
    flash_attention_2 on CPU was accepted and failed in the worker); the sentence is the
    engine's (:func:`akka_optimize.engine.attention.flash_attention_device_refusal`)."""

    model = (f["resolved"].get("config") or {}).get("model") or {}
    if model.get("attentionImplementation") != "flash_attention_2":
        return None
    why = flash_attention_device_refusal(f["device_kind"])
    if why is None:
        return None
    return InvalidRequest(why, field="config.model.attentionImplementation", code="not_available")


def _base_model(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """A base model nobody selected (or whose selection failed) would leave the run
    ``QUEUED`` for a selection no one started; one still fetching is fine (the run
    waits). The message names the select command. A READY model whose catalog LoRA
    targets match none of its modules is refused too (jobs/lora_targets.py)."""

    try:
        path, entry = ready_model_dir(session, ctx.settings, f["base_model"])
    except Conflict as exc:
        if exc.code in ("base_model_not_selected", "base_model_failed"):
            return InvalidRequest(exc.message, field="baseModel", code=exc.code)
        return None
    try:
        refuse_unmatched_targets(path, entry)
    except InvalidRequest as exc:
        return exc
    return None


def _claim_args(ctx: JobContext, f: dict[str, Any]) -> tuple[Any, str | None, str, int, bool]:

    dep = ctx.deployment()
    r = f["resolved"]
    rl = (r.get("config") or {}).get("rlHyperparams") or {}
    judged = f["method"] == "rl" and str(rl.get("reward") or "").startswith("model:")
    profile = (r.get("execution") or {}).get("deviceProfile")
    return dep, profile, f["device_kind"], f["gpus"], judged


def claims(ctx: JobContext, f: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims the run of fields ``f`` will make, as its record shows them
    (:func:`akka_optimize.jobs.capacity.usage.claim_list`): its training devices, and its judge
    endpoint when its reward is a ``model:`` judge."""

    return capacity.claim_list(*_claim_args(ctx, f))


def _capacity(ctx: JobContext, f: dict[str, Any]) -> AkkaError | None:
    """A claim no quota or pool could ever admit (issue 22; seeds/000 "a judged
    reinforcement run needs quota for two claims"): a judged run (``reward: model:…``)
    claims its training devices and its judge endpoint."""

    dep, profile, kind, gpus, judged = _claim_args(ctx, f)
    try:
        devices = capacity.run_devices(dep, profile, kind, gpus, judged)
    except InvalidRequest as exc:
        return exc
    field = "config.rlHyperparams.reward" if judged else "execution.gpus"
    return capacity.refusal(
        dep, f["project"], devices, capacity.claim_words(devices, judged), field
    )


def _model_name(session: Session, f: dict[str, Any]) -> AkkaError | None:

    return trained_name_refusal(session, f["project"], f["model_name"], f["base_model"])


def _readable(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """A dataset, validation dataset or reward bundle the jobs cannot read (F019;
    :mod:`akka_optimize.jobs.readable`)."""

    cfg = f["resolved"].get("config") or {}
    todo = [("dataset", "config.dataset", cfg.get("dataset"))]
    todo.append(("dataset", "config.data.validationDataset", f["validation_dataset"]))
    reward = str((cfg.get("rlHyperparams") or {}).get("reward") or "")
    if reward.startswith("bundle:"):
        ref = reward.removeprefix("bundle:").split("#", 1)[0]
        todo.append(("bundle", "config.rlHyperparams.reward", ref))
    try:
        for kind, field, ref in todo:
            if ref:
                check_readable(ctx, field, resolve(session, kind, ref, f["project"]))
    except AkkaError as exc:
        return exc
    return None


def _rows(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """A dataset or validation dataset whose rows the worker could not train (issue 47;
    :mod:`akka_optimize.jobs.trainable`)."""

    return rows_refusal(ctx, session, f)


# Plan fields that shape how rows become tokens: prepared token rows are already tokens
# and masks, so a plan stating one would have it ignored (seeds/001 "Train prepared token
# rows as given"); the start refuses it instead.
_ROW_FIELDS = ("config.loss.", "config.data.onTooLong")


def _prepared(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """Prepared token rows (F029, F030), checked before any device is claimed: only a
    supervised run trains them, a stated loss policy would be ignored, the base model's
    tokenizer and chat template must be the ones the rows were made with (checked once
    the base model is READY; the worker checks again), and ``maxSeqLength`` must hold the
    longest row."""

    todo = [("config.dataset", f["dataset"]),
            ("config.data.validationDataset", f["validation_dataset"])]  # fmt: skip
    try:
        for field, ref in todo:
            if not ref:
                continue
            version = resolve(session, "dataset", ref, f["project"])
            if not is_prepared(version):
                continue
            if f["method"] != "sft":
                return InvalidRequest(
                    f"{field} {version.pinned} holds prepared token rows, which only a "
                    f"supervised run trains; config.method is {f['method']!r}",
                    field=field,
                    code="prepared_rows",
                )
            stated = [p for p in f["resolved"].get("stated") or [] if p.startswith(_ROW_FIELDS)]
            if stated:
                return InvalidRequest(
                    f"{stated[0]}: {version.pinned} holds prepared token rows, trained with "
                    "their own loss_mask and never truncated, so this setting would be "
                    "ignored; remove it",
                    field=stated[0],
                    code="prepared_rows",
                )
            info = dict(version.metadata["prepared"])
            try:
                path = tokenizer_dir(session, ctx.settings, f["base_model"])
            except AkkaError:
                path = None  # not READY yet: _base_model says why, or the worker checks
            if path is not None:
                check_tokenizer(info, load_tokenizer(path))
            check_length(info, int(f["resolved"]["config"]["maxSeqLength"]))
    except AkkaError as exc:
        if exc.field == "config.dataset" and field != "config.dataset":
            exc.field = field
        return exc
    return None


def admission_refusals(ctx: JobContext, session: Session, resolved: Any) -> list[AkkaError]:
    """Every reason the start of ``resolved`` would be refused, in the order a start checks
    them; empty when it may start. Reads the database, creates nothing.

    Args:
        resolved: a :class:`akka_optimize.plan.resolve.ResolvedPlan` (already resolved:
            its plan refusals, warm start and ``branchFrom`` have been checked).

    Returns:
        Errors, each with ``code``, ``field`` and a sentence naming what to change.
    """
    f = job_fields(resolved)
    found = [
        _method(f),
        _prepared(ctx, session, f),
        _kind(ctx, session, f),
        _gpus(ctx, f),
        _schedulable(ctx, f),
        _attention(f),
        _base_model(ctx, session, f),
        _model_name(session, f),
        _readable(ctx, session, f),
        _rows(ctx, session, f),
        _capacity(ctx, f),
    ]
    return [e for e in found if e is not None]


def admit(ctx: JobContext, session: Session, resolved: Any) -> None:
    """Raise the first of :func:`admission_refusals`; return when the run may start.

    Raises:
        InvalidRequest, Conflict: the same error the dry run reports first.
    """
    refusals = admission_refusals(ctx, session, resolved)
    if refusals:
        raise refusals[0]


def refusal_entry(exc: AkkaError) -> dict[str, Any]:
    """A dry run's ``refusals`` entry for an admission refusal: ``{code, field, message,
    status, value, limit}`` (``value`` and ``limit`` None, as plan refusals may carry)."""
    return {
        "code": exc.code,
        "field": exc.field,
        "message": exc.message,
        "status": exc.status,
        "value": None,
        "limit": None,
    }
