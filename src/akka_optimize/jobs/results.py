"""Registration of a run's result: its adapter becomes a version of the run's model.

The adapter a worker uploaded is materialised from the blob store, made self-describing
(:func:`describe_adapter`) and registered (:func:`akka_optimize.registry.register_adapter`).
:func:`complete` applies a supervised run's ``completed`` event: it registers the newest
saved adapter, or fails the run with a sentence.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt, Snapshot
from ..registry import register_adapter
from . import states as S
from .blobs import download_prefix
from .context import JobContext
from .fields import setting as _get
from .kinds import model_registered
from .records import end_attempt

log = logging.getLogger("akka_optimize.jobs")

PROVENANCE_FILE = "akka-optimize.json"
"""Written into every adapter a run registers: the run, base model, data and step."""


def materialize_adapter(store: Any, key: str) -> Path:
    """Download an adapter saved under ``key`` into a temporary folder (caller removes it)."""
    tmp = Path(tempfile.mkdtemp(prefix="akka-adapter-"))
    try:
        return download_prefix(store, key, tmp)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def describe_adapter(adapter_dir: Path, run: Run, snap: Snapshot) -> None:
    """Make a run's adapter folder self-describing and independent of worker paths.

    PEFT records the folder the base model was loaded from (a worker's local path) as
    ``base_model_name_or_path`` and writes ``target_modules`` in set order (which
    changes with each process's hash seed); they become the run's base-model reference
    and a sorted list, so two runs that train the same weights store byte-identical
    ``adapter_config.json`` and ``adapter_model.safetensors``. :data:`PROVENANCE_FILE` names
    the run, so each run still registers its own version (a version's digest covers all
    its files).
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


def register(
    ctx: JobContext,
    s: Session,
    run: Run,
    snap: Snapshot,
    extra: dict[str, Any],
    model_name: str | None = None,
) -> str:
    """Register the adapter of ``snap`` as a version of the run's model (or of
    ``model_name`` in the run's project) and tell the registration's listeners
    (:func:`akka_optimize.jobs.kinds.model_registered`: a project's evaluation settings
    queue its evaluation); returns its pinned ref."""

    adapter_dir = materialize_adapter(ctx.store, snap.adapter_key)
    try:
        describe_adapter(adapter_dir, run, snap)
        rv = register_adapter(
            s,
            ctx.store,
            run.project,
            model_name or run.model_name,
            adapter_dir,
            base_model=run.base_model,
            run_id=run.id,
            metadata=_metadata(run, extra),
            parent_model=(run.resolved or {}).get("warmStartModelId"),
        )
    finally:
        shutil.rmtree(adapter_dir, ignore_errors=True)
    snap.model_version = rv.pinned
    model_registered(ctx, s, run.project, rv)
    return rv.pinned


def note_epoch_model(run: Run, snap: Snapshot, version: str) -> None:
    """Record ``version`` (a pinned ref) as the model of ``snap``'s epoch in the run's
    ``results.epochModels`` (seeds/001 "Keep an adapter for each epoch")."""
    epochs = dict((run.results or {}).get("epochModels") or {})
    epochs[str(snap.epoch)] = version
    run.results = {**(run.results or {}), "epochModels": epochs}


def _metadata(run: Run, extra: dict[str, Any]) -> dict[str, Any]:
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
            if k
            in (
                "instructions",
                "adaptedModules",
                "finalLoss",
                "meanLoss",
                "reward",
                "rewardStart",
                "rewardFinal",
            )
        }
    )
    return meta


def model_name_of(pinned: str) -> str:
    """The NAME of a pinned model ref ``ns/name:vN@sha256:…``."""
    return pinned.split("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]


def _smoke_end(run: Run, att: RunAttempt, reading: dict[str, Any]) -> None:
    """A smoke run registers no model: REPRODUCED ends it SUCCEEDED; UNSTABLE_READING
    (an early stop below the threshold; engine/smoke.py) ends it FAILED with a sentence
    that gives the reading."""
    if reading.get("reading") == "REPRODUCED":
        end_attempt(run, att, S.SUCCEEDED)
        return
    end_attempt(
        run,
        att,
        S.FAILED,
        f"UNSTABLE_READING: the smoke check stopped at step {reading.get('step')} with "
        f"reproduction {float(reading.get('reproduction') or 0):.3f} over its "
        f"{reading.get('rows')}-row slice, below the threshold {reading.get('threshold')}; "
        "the plan did not make the model reproduce the slice. Check config.loss, the "
        "learning rate and the chat template, or raise smokeCheck.maxSteps.",
    )


def complete(ctx: JobContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]) -> None:
    """Apply a ``completed`` event: record the result and register the newest saved adapter
    (unless a save already registered it under the run's model name; a snapshot registered
    as a candidate under another name does not count); a run without one, or one the registry refuses,
    ends ``FAILED`` with a sentence."""
    run.results = {**(run.results or {}), **(ev.get("result") or {})}
    if (ev.get("result") or {}).get("smoke"):
        _smoke_end(run, att, ev["result"]["smoke"])
        return
    last = s.scalar(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.adapter_key.is_not(None))
        .order_by(Snapshot.step.desc())
    )
    if last is None:
        end_attempt(
            run,
            att,
            S.FAILED,
            "The run finished without saving an adapter, so no model could be registered.",
        )
        return
    epoch_model = last.epoch_end and bool(_get(run.resolved, "execution.saveEachEpoch"))
    extra = {"epoch": last.epoch, "step": last.step} if epoch_model else {"step": last.step}
    try:
        mine = last.model_version and model_name_of(last.model_version) == run.model_name
        run.registered_model = (last.model_version if mine else None) or register(
            ctx, s, run, last, {**extra, "final": True}
        )
        if epoch_model:
            note_epoch_model(run, last, run.registered_model)
    except Exception as exc:  # a refusal by the registry is the run's failure sentence
        log.exception("registering the model of run %s failed", run.id)
        end_attempt(
            run,
            att,
            S.FAILED,
            getattr(exc, "message", None) or f"Registering the model failed: {exc}",
        )
        return
    end_attempt(run, att, S.SUCCEEDED)
