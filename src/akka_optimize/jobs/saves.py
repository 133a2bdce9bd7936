"""A supervised run's saves: recording each snapshot and pruning old states and adapters.

Applies the ``save`` event (seeds/001 "Keep an adapter for each epoch"): the newest
``execution.keepRecoverable`` states stay resumable, ``execution.keepAdapters`` adapters stay
stored, and with ``execution.saveEachEpoch`` each epoch's adapter is registered as a model.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt, Snapshot
from .context import JobContext
from .results import note_epoch_model, register


def record_save(
    ctx: JobContext, s: Session, run: Run, _att: RunAttempt, ev: dict[str, Any]
) -> None:
    """Apply a ``save`` event: record the snapshot, drop states and adapters beyond the
    plan's limits, and register an epoch's adapter when the plan asks for each epoch."""
    step = int(ev["step"])
    snap = s.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == step))
    if snap is None:
        snap = Snapshot(run_id=run.id, step=step)
        s.add(snap)
    snap.epoch = ev.get("epoch")
    snap.epoch_end = bool(ev.get("epochEnd"))
    snap.state_key = ev.get("stateKey")
    snap.adapter_key = ev.get("adapterKey")
    snap.state_bytes = int(ev.get("stateBytes") or 0)
    snap.adapter_bytes = int(ev.get("adapterBytes") or 0)
    snap.recoverable = bool(snap.state_key)
    run.last_saved_step = step
    s.flush()
    execution = (run.resolved or {}).get("execution") or {}
    _prune_states(ctx, s, run, int(execution.get("keepRecoverable") or 1))
    save_each_epoch = bool(execution.get("saveEachEpoch"))
    # The run's last update is registered by its completed event, with the run's result
    # (instructions, finalLoss, meanLoss) like any run's final model (issue 47).
    last = bool(run.total_steps) and step >= int(run.total_steps or 0)
    if snap.epoch_end and save_each_epoch and snap.adapter_key and not last:
        note_epoch_model(
            run, snap, register(ctx, s, run, snap, {"epoch": snap.epoch, "step": step})
        )
    _prune_adapters(ctx, s, run, save_each_epoch)


def _prune_states(ctx: JobContext, s: Session, run: Run, keep: int) -> None:
    """Delete the stored training states beyond the newest ``keep`` resumable ones."""
    kept = s.scalars(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.recoverable.is_(True))
        .order_by(Snapshot.step.desc())
    ).all()
    for old in kept[keep:]:
        if old.state_key:
            ctx.store.delete(old.state_key)
        old.recoverable = False


def _prune_adapters(ctx: JobContext, s: Session, run: Run, save_each_epoch: bool) -> None:
    """Delete the stored adapters beyond ``execution.keepAdapters`` (newest kept).

    seeds/001 "Keep an adapter for each epoch": with ``saveEachEpoch`` the saves that
    ended an epoch are retained without counting toward the limit, and so is any save
    registered as a model version. The newest adapter is always among those kept, so the
    run's final model can still be registered.
    """
    execution = (run.resolved or {}).get("execution") or {}
    keep = int(execution.get("keepAdapters") or 3)
    counted = [
        snap
        for snap in s.scalars(
            select(Snapshot)
            .where(Snapshot.run_id == run.id, Snapshot.adapter_key.is_not(None))
            .order_by(Snapshot.step.desc())
        ).all()
        if not (snap.epoch_end and save_each_epoch) and not snap.model_version
    ]
    for old in counted[keep:]:
        ctx.store.delete(old.adapter_key)
        old.adapter_key = None
        old.adapter_bytes = 0  # bytes still stored
