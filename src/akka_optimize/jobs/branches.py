"""Branches: a run that starts from a snapshot of another run (seeds/000 "Parameter
sweeps and run lineage", FEATURES F107).

A branch names ``branchFrom: {"run": RUN_ID, "snapshot": "step-N"}``. It continues the
source's training state at update ``N`` (adapter, AdamW moments, RNG states, data
cursor) under its own plan, so exploring a change costs only the updates after ``N``.
Its own plan decides the learning rate, schedule, weight decay, clipping, validation,
saves and how long it trains (``epochs``, ``maxSteps``); what decides the adapter's
shape and which rows each update holds must equal the source's (:data:`FIXED`), and a
plan that changes one is refused at start, naming the field and both values.

At start the source's state is copied under the branch's own saves as its first
snapshot (``step-N``), so the source may prune or delete its saves afterwards and a
branch that fails before its first own save still resumes.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, Snapshot
from ..errors import InvalidRequest, NotFound
from .fields import setting as _get
from .records import get_run

FIXED = (
    "baseModel",
    "config.method",
    "config.dataset",
    "config.maxSeqLength",
    "config.hyperparams.lora.rank",
    "config.hyperparams.lora.alpha",
    "config.hyperparams.training.seed",
    "config.hyperparams.training.microBatchPerGpu",
    "config.hyperparams.training.gradientAccumulation",
)
"""Plan settings a branch must share with its source (adapter shape, row order)."""


def parse_snapshot(name: str) -> int:
    """``step-N`` or ``N`` → N. Raises InvalidRequest naming ``branchFrom.snapshot``."""
    text = str(name).removeprefix("step-")
    if not text.isdigit() or int(text) < 1:
        raise InvalidRequest(
            f"branchFrom.snapshot {name!r} is not a snapshot name; use step-N, as "
            "training runs snapshots lists them.",
            field="branchFrom.snapshot",
        )
    return int(text)


def branch_origin(session: Session, plan: dict[str, Any]) -> tuple[Run, Snapshot] | None:
    """The source run and kept snapshot a plan's ``branchFrom`` names (None without one).

    Raises:
        InvalidRequest: the run or snapshot does not exist, the snapshot is no longer
            resumable (the sentence lists those that are), or the plan changes a
            :data:`FIXED` setting (the sentence names it with both values).
    """
    ref = plan.get("branchFrom")
    if not ref:
        return None
    try:
        source = get_run(session, str(ref["run"]))
    except NotFound as exc:
        raise InvalidRequest(f"branchFrom.run: {exc.message}", field="branchFrom.run") from exc
    if plan.get("warmStartModelId"):
        raise InvalidRequest(
            "warmStartModelId: a branch starts from its snapshot's adapter, so it cannot "
            "also warm-start from a model; remove one of branchFrom and warmStartModelId.",
            field="warmStartModelId",
        )
    step = parse_snapshot(ref["snapshot"])
    kept = session.scalars(
        select(Snapshot)
        .where(Snapshot.run_id == source.id, Snapshot.recoverable.is_(True))
        .order_by(Snapshot.step)
    ).all()
    snap = next((s for s in kept if s.step == step and s.state_key), None)
    if snap is None:
        have = ", ".join(f"step-{s.step}" for s in kept) or "none"
        raise InvalidRequest(
            f"Run {source.id} has no resumable snapshot step-{step} to branch from "
            f"(its plan's execution.keepRecoverable keeps the newest); resumable: {have}.",
            field="branchFrom.snapshot",
        )
    theirs = source.resolved or {}
    for path in FIXED:
        mine, its = _get(plan, path), _get(theirs, path)
        if mine != its:
            raise InvalidRequest(
                f"{path} {json.dumps(mine)} differs from the source run's {json.dumps(its)}; a branch continues "
                f"run {source.id}'s adapter and row order, so it keeps {path}.",
                field=path,
            )
    _refuse_no_extra_update(plan, source, step)
    return source, snap


def branch_settings(session: Session, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The resolved plan of the run a plan's ``branchFrom.run`` names, the settings the
    branch keeps where it states none (F021); None without a source run (then
    :func:`branch_origin` refuses, naming ``branchFrom.run``)."""
    ref = plan.get("branchFrom")
    if not isinstance(ref, dict) or not ref.get("run"):
        return None
    try:
        return get_run(session, str(ref["run"])).resolved
    except (NotFound, InvalidRequest):
        return None


def _refuse_no_extra_update(plan: dict[str, Any], source: Run, step: int) -> None:
    """A branch must train at least one update after its snapshot. Its length follows
    from its epochs and maxSteps over the source's trainable rows (the same dataset and
    maxSeqLength, so the same rows)."""
    training = _get(plan, "config.hyperparams.training", {})
    per_update = int(training.get("microBatchPerGpu") or 1) * int(
        training.get("gradientAccumulation") or 1
    )
    examples = int(_get(source.results, "data.examples", 0))
    limits = []
    if examples:
        per_epoch = -(-examples // per_update)
        limits.append((per_epoch * int(training.get("epochs") or 1), "epochs"))
    if training.get("maxSteps"):
        limits.append((int(training["maxSteps"]), "maxSteps"))
    if not limits:
        return
    total, name = min(limits)
    if total <= step:
        raise InvalidRequest(
            f"The branch trains no update after step-{step}: its plan ends at update "
            f"{total}; raise config.hyperparams.training.{name}.",
            field=f"config.hyperparams.training.{name}",
        )


def record_origin(store: Any, session: Session, run: Run, source: Run, snap: Snapshot) -> None:
    """Copy the source's state at ``snap`` into ``run``'s saves as its first snapshot and
    make the run's first attempt resume from it."""
    key = f"runs/{run.id}/saves/step-{snap.step}/state"
    size = store.copy_prefix(snap.state_key, key)
    session.add(
        Snapshot(
            run_id=run.id,
            step=snap.step,
            epoch=snap.epoch,
            epoch_end=snap.epoch_end,
            state_key=key,
            state_bytes=size,
            recoverable=True,
        )
    )
    run.resume_step = snap.step
    run.last_saved_step = snap.step
    run.current_step = snap.step
    run.results = {
        **(run.results or {}),
        "branchFrom": {"run": source.id, "snapshot": f"step-{snap.step}"},
    }


def is_origin(run: Run, step: int | None) -> bool:
    """Whether resuming ``run`` at ``step`` starts from its branch origin (the state of
    another run, trained under that run's settings)."""
    ref = (run.resolved or {}).get("branchFrom")
    return bool(ref) and step is not None and f"step-{step}" == str(ref.get("snapshot"))


def _parent(run: Run) -> str | None:
    ref = (run.resolved or {}).get("branchFrom")
    return str(ref["run"]) if ref else None


def tree(session: Session, root: Run) -> dict[str, Any]:
    """Every generation of branches below ``root`` (seeds/000 ``training runs tree``).

    Returns:
        ``{"run", "snapshot", "state", "model", "branches": [...]}`` nested, the branches
        of each run ordered by creation; ``snapshot`` is where a branch left its parent.
    """
    runs = session.scalars(select(Run).order_by(Run.created_at, Run.id)).all()
    below: dict[str, list[Run]] = {}
    for r in runs:
        parent = _parent(r)
        if parent:
            below.setdefault(parent, []).append(r)

    def node(r: Run, seen: frozenset[str]) -> dict[str, Any]:
        ref = (r.resolved or {}).get("branchFrom") or {}
        return {
            "run": r.id,
            "snapshot": ref.get("snapshot"),
            "state": r.state,
            "model": r.registered_model,
            "branches": [node(c, seen | {r.id}) for c in below.get(r.id, []) if c.id not in seen],
        }

    return node(root, frozenset())


def ancestry(session: Session, run: Run) -> list[dict[str, Any]]:
    """The runs from ``run`` back to the run its lineage started from (seeds/000
    ``training runs ancestry``): ``[{"run", "snapshot", "state"}]``, ``run`` first, the
    root last; ``snapshot`` is where each run branched from the next one."""
    out: list[dict[str, Any]] = []
    cur: Run | None = run
    seen: set[str] = set()
    while cur is not None and cur.id not in seen:
        seen.add(cur.id)
        ref = (cur.resolved or {}).get("branchFrom") or {}
        out.append({"run": cur.id, "snapshot": ref.get("snapshot"), "state": cur.state})
        parent = _parent(cur)
        cur = session.get(Run, parent) if parent else None
    return out
