"""How the service applies a worker's events to the run record."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run, RunAttempt, RunMetric, Snapshot
from . import states as S

log = logging.getLogger("akka_optimize.jobs")


def apply_event(ctx: Any, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]) -> None:
    """Apply one event (``phase``, ``data``, ``metrics``, ``validation``, ``save``,
    ``completed``, ``failed``, ``paused``, ``cancelled``) to ``run``."""
    kind = ev.get("type")
    if kind == "phase":
        if run.state in S.ACTIVE and ev.get("phase") in S.ACTIVE:
            run.state = ev["phase"]
        run.phase_detail = ev.get("detail") or str(ev.get("phase", "")).replace("_", " ")
        if ev.get("adaptedModules"):
            run.results = {**(run.results or {}), "adaptedModules": ev["adaptedModules"]}
        if ev.get("totalSteps"):
            run.total_steps = int(ev["totalSteps"])
    elif kind == "data":
        run.results = {
            **(run.results or {}),
            "data": ev.get("train"),
            "validationData": ev.get("validation"),
        }
    elif kind in ("metrics", "validation"):
        step = int(ev.get("step", 0))
        values = {k: v for k, v in ev.items() if k not in ("type", "step")}
        s.add(RunMetric(run_id=run.id, attempt=att.number, kind=kind, step=step, values=values))
        if kind == "metrics":
            run.current_step = step
            run.phase_detail = "training"
            if ev.get("totalSteps"):
                run.total_steps = int(ev["totalSteps"])
        else:
            run.results = {**(run.results or {}), "validationLoss": ev.get("loss")}
    elif kind == "save":
        _record_save(ctx, s, run, ev)
    elif kind == "completed":
        _complete(ctx, s, run, att, ev.get("result") or {})
    elif kind == "failed":
        _end(run, att, S.FAILED, ev.get("reason") or "The worker failed without a reason.")
        run.failure_detail = ev.get("detail")
    elif kind == "paused":
        _end(run, att, S.PAUSED)
        run.finished_at = None
    elif kind == "cancelled":
        _end(run, att, S.CANCELLED)


def _end(run: Run, att: RunAttempt, state: str, reason: str | None = None) -> None:
    att.state = S.SUCCEEDED if state in (S.SUCCEEDED, S.PAUSED) else state
    att.ended_at = utcnow()
    run.state = state
    run.control = None
    run.phase_detail = None
    if state in S.TERMINAL:
        run.finished_at = utcnow()
    if reason:
        run.failure_reason = reason


def _record_save(ctx: Any, s: Session, run: Run, ev: dict[str, Any]) -> None:
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
    keep = int(((run.resolved or {}).get("execution") or {}).get("keepRecoverable") or 1)
    kept = s.scalars(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.recoverable.is_(True))
        .order_by(Snapshot.step.desc())
    ).all()
    for old in kept[keep:]:
        if old.state_key:
            ctx.store.delete(old.state_key)
        old.recoverable = False
    save_each_epoch = bool(((run.resolved or {}).get("execution") or {}).get("saveEachEpoch"))
    if snap.epoch_end and save_each_epoch and snap.adapter_key:
        version = register(ctx, s, run, snap, {"epoch": snap.epoch, "step": step})
        epochs = dict((run.results or {}).get("epochModels") or {})
        epochs[str(snap.epoch)] = version
        run.results = {**(run.results or {}), "epochModels": epochs}
    _prune_adapters(ctx, s, run, save_each_epoch)


def _prune_adapters(ctx: Any, s: Session, run: Run, save_each_epoch: bool) -> None:
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


PROVENANCE_FILE = "akka-optimize.json"
"""Written into every adapter a run registers: the run, base model, data and step."""


def describe_adapter(adapter_dir: Path, run: Run, snap: Snapshot) -> None:
    """Make a run's adapter folder self-describing and independent of worker paths.

    PEFT records the folder the base model was loaded from (a worker's local path) as
    ``base_model_name_or_path`` and writes ``target_modules`` in set order (which
    changes with each process's hash seed); they become the run's base-model reference
    and a sorted list, so two runs that train the same weights store byte-identical
    ``adapter_config.json`` and ``adapter_model.safetensors``. :data:`PROVENANCE_FILE` names the run, so each run
    still registers its own version (a version's digest covers all its files).
    """
    cfg_path = adapter_dir / "adapter_config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = run.base_model
        if isinstance(cfg.get("target_modules"), list):
            cfg["target_modules"] = sorted(cfg["target_modules"])
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    provenance = {
        "run": run.id,
        "baseModel": run.base_model,
        "dataset": run.dataset,
        "validationDataset": run.validation_dataset,
        "configHash": run.config_hash,
        "step": snap.step,
        "epoch": snap.epoch,
    }
    (adapter_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")


def register(ctx: Any, s: Session, run: Run, snap: Snapshot, extra: dict[str, Any]) -> str:
    """Register the adapter of ``snap`` as a version of the run's model; returns its pinned ref."""
    from ..registry import register_adapter
    from .service import materialize_adapter

    adapter_dir = materialize_adapter(ctx.store, snap.adapter_key)
    try:
        describe_adapter(adapter_dir, run, snap)
        hp = ((run.resolved or {}).get("config") or {}).get("hyperparams") or {}
        meta = {
            "run": run.id,
            "configHash": run.config_hash,
            "dataset": run.dataset,
            "validationDataset": run.validation_dataset,
            "method": run.method,
            "rank": (hp.get("lora") or {}).get("rank"),
            **extra,
        }
        meta.update(
            {
                k: v
                for k, v in (run.results or {}).items()
                if k in ("instructions", "adaptedModules", "finalLoss", "meanLoss")
            }
        )
        rv = register_adapter(
            s,
            ctx.store,
            run.project,
            run.model_name,
            adapter_dir,
            base_model=run.base_model,
            run_id=run.id,
            metadata=meta,
            parent_model=(run.resolved or {}).get("warmStartModelId"),
        )
    finally:
        shutil.rmtree(adapter_dir, ignore_errors=True)
    snap.model_version = rv.pinned
    return rv.pinned


def _complete(ctx: Any, s: Session, run: Run, att: RunAttempt, result: dict[str, Any]) -> None:
    run.results = {**(run.results or {}), **result}
    last = s.scalar(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.adapter_key.is_not(None))
        .order_by(Snapshot.step.desc())
    )
    if last is None:
        _end(
            run,
            att,
            S.FAILED,
            "The run finished without saving an adapter, so no model could be registered.",
        )
        return
    try:
        run.registered_model = last.model_version or register(
            ctx, s, run, last, {"step": last.step, "final": True}
        )
    except Exception as exc:  # a refusal by the registry is the run's failure sentence
        log.exception("registering the model of run %s failed", run.id)
        _end(
            run,
            att,
            S.FAILED,
            getattr(exc, "message", None) or f"Registering the model failed: {exc}",
        )
        return
    _end(run, att, S.SUCCEEDED)
