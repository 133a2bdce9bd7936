"""A saved Tinker adapter (a blob folder in PEFT format) registered as a model version:
a sampler checkpoint when it is saved (:func:`akka_optimize.tinker.kind.register_sampler_weights`)
and any checkpoint on request (:mod:`akka_optimize.tinker.checkpoints_in`)."""

from __future__ import annotations

import json
import shutil
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..jobs.results import PROVENANCE_FILE, materialize_adapter
from ..registry import register_adapter


def register_blob(
    s: Session,
    store: Any,
    run: Run,
    key: str,
    namespace: str,
    name: str,
    metadata: dict[str, Any],
    provenance: dict[str, Any],
    alias: str | None = None,
) -> Any:
    """Register the PEFT adapter stored under blob ``key`` as the next version of
    ``namespace/name`` on ``run``'s base model, produced by ``run``; returns the
    :class:`~akka_optimize.registry.ModelVersion`. The folder is made self-describing
    first: ``base_model_name_or_path`` is the run's base model (not a worker's path) and
    ``target_modules`` are sorted (PEFT writes them in set order), and ``provenance`` is
    written beside them (:data:`~akka_optimize.jobs.results.PROVENANCE_FILE`)."""

    adapter_dir = materialize_adapter(store, key)
    try:
        cfg_path = adapter_dir / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = run.base_model
        if isinstance(cfg.get("target_modules"), list):
            cfg["target_modules"] = sorted(cfg["target_modules"])
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        (adapter_dir / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
        return register_adapter(
            s,
            store,
            namespace,
            name,
            adapter_dir,
            base_model=run.base_model,
            run_id=run.id,
            metadata=metadata,
            alias=alias,
        )
    finally:
        shutil.rmtree(adapter_dir, ignore_errors=True)
