"""What a worker does for a preference run (``config.method: dpo``): prepare pairs, train,
upload saves (issue 50). It reads as :mod:`akka_optimize.jobs.training` does for a
supervised run and shares its steps: settings → pairs → engine → saves → result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..store import BlobStore
from .spec import JobSpec
from .training import (
    CancelledWhileTokenizing,
    answering,
    first_system_message,
    load_rows,
    result_fields,
    starting_state,
    stop_event,
    tokenizing_progress,
    uploading,
)


def first_prompt_instructions(rows: list[dict[str, Any]]) -> str | None:
    """The model's training instructions: the first system message of the pairs' prompts."""

    return first_system_message([{"messages": r.get("prompt") or []} for r in rows])


def _prepare_pairs(spec: JobSpec, store: BlobStore, events: Any) -> tuple[list, Any, Any]:
    """Rows, training pairs and validation pairs (or None), with their phase and ``data``
    events (:func:`akka_optimize.data.preference.prepare_pairs`)."""
    from transformers import AutoTokenizer

    from ..data.masks import naming_dataset  # lazy: numpy
    from ..data.preference import prepare_pairs  # lazy: numpy

    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the pairs"})
    tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
    rows = load_rows(store, spec.dataset)
    progress = tokenizing_progress(events, len(rows))
    progress(0)
    train = prepare_pairs(tokenizer, rows, spec.max_seq_length, spec.on_too_long, progress=progress)
    val = None
    if spec.validation_dataset:
        try:
            val_rows = load_rows(store, spec.validation_dataset)
            val = prepare_pairs(tokenizer, val_rows, spec.max_seq_length, "drop")
        except InvalidRequest as exc:
            field = "config.data.validationDataset"
            raise naming_dataset(exc, field, spec.validation_dataset["ref"]) from exc
    events.send({"type": "data", "train": train.report, "validation": val.report if val else None})
    return rows, train, val


def train_dpo(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """Train one attempt of a preference run; returns the final event (``completed``,
    ``paused`` or ``cancelled``)."""
    from ..engine import distributed  # lazy: torch
    from ..engine.config import EngineConfig  # lazy: torch
    from ..engine.dpo.loop import run_dpo  # lazy: torch
    from ..engine.dpo.loss import DpoSettings  # lazy: torch

    distributed.init_ranks(int(spec.engine.get("ranks", 1)), spec.device)
    try:
        try:
            rows, train, val = _prepare_pairs(spec, store, events)
        except CancelledWhileTokenizing:
            return {"type": "cancelled"}
        cfg = EngineConfig(**spec.engine)
        settings = DpoSettings(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in spec.extra["dpo"].items()}
        )
        state_dir = work / "state"
        resume_step, warm_dir = starting_state(spec, store, work, state_dir)
        speed = {"tokens": 0, "seconds": 0.0}
        events.send({"type": "phase", "phase": "RUNNING", "detail": "training"})
        instructions = first_prompt_instructions(rows)
        trained: dict[str, Any] = {}
        result = run_dpo(
            cfg,
            settings,
            Path(spec.model_dir),
            train.pairs,
            val.pairs if val else None,
            state_dir,
            uploading(spec, store, events, speed),
            resume_step=resume_step,
            branch=spec.branch_origin,
            init_adapter=warm_dir,
            should_stop=lambda: events.control in ("pause", "cancel"),
            until=answering(instructions, trained),
        )
    finally:
        distributed.finish_ranks()
    stopped = stop_event(events, result)
    if stopped is not None:
        return stopped
    seconds = speed["seconds"]
    out = {
        **result_fields(result),
        "validationLoss": result.final_validation_loss,
        "adaptedModules": result.adapted_modules,
        "totalTokens": speed["tokens"],
        "tokensPerSecond": round(speed["tokens"] / seconds, 1) if seconds else None,
        "instructions": instructions,
        "trainedAnswers": trained or None,
        "pairs": train.report.get("pairs"),
    }
    return {"type": "completed", "result": out}
