"""Saves of a training run: where each step's state and adapter live
(:func:`state_path`), which are kept (:func:`recoverable_steps`), writing and verifying
one (:func:`save_snapshot`), and the settings a resume or a branch must keep
(:data:`ORDER_SETTINGS`, :data:`BRANCH_SETTINGS`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .checks import verify_adapter
from .config import EngineConfig
from .errors import AdapterCheckError
from .session.training import TrainingSession

Emit = Callable[[dict[str, Any]], None]
# Settings that decide which rows an update holds; a resume must not change them.
ORDER_SETTINGS = (
    "seed",
    "shuffle",
    "micro_batch",
    "gradient_accumulation",
    "ranks",
    "epochs",
    "max_steps",
)
# A branch may train longer (epochs, max_steps) but keeps which rows each update holds.
BRANCH_SETTINGS = ("seed", "shuffle", "micro_batch", "gradient_accumulation", "ranks")


def state_path(state_dir: Path, step: int) -> Path:
    """Folder of the save at ``step``: ``step-00000013/`` holding ``state/`` and ``adapter/``."""
    return Path(state_dir) / f"step-{step:08d}"


def recoverable_steps(state_dir: Path) -> list[int]:
    """Steps whose training state is kept (resumable), oldest first."""
    root = Path(state_dir)
    if not root.exists():
        return []
    return sorted(
        int(p.name[5:]) for p in root.glob("step-*") if (p / "state" / "state.json").exists()
    )


def save_snapshot(
    session: TrainingSession,
    cfg: EngineConfig,
    model_dir: Path,
    state_dir: Path,
    epoch: int | None,
    epoch_end: bool,
    rows: int,
    log: dict,
    emit: Emit,
) -> Path:
    """Save state + adapter at the current step, verify the adapter, prune old states."""
    step = session.step
    emit({"type": "phase", "phase": "saving", "step": step})
    folder = state_path(state_dir, step)
    cursor = {"epoch": epoch, "epochEnd": epoch_end, "rows": rows, "log": log}
    session.save_state(folder / "state", cursor)
    adapter = session.save_adapter(folder / "adapter")
    if not session.is_main:  # rank 0 writes, verifies, reports and prunes the save
        return adapter
    event = {
        "type": "save",
        "step": step,
        "epoch": epoch,
        "epochEnd": epoch_end,
        "stateDir": str(folder / "state"),
        "adapterDir": str(adapter),
    }
    try:
        verify_adapter(
            adapter,
            model_dir,
            cfg.lora_rank,
            cfg.target_modules,
            cfg.auto_class,
            alpha=cfg.lora_alpha,
        )
    except AdapterCheckError as exc:
        shutil.rmtree(adapter, ignore_errors=True)
        emit({**event, "adapterDir": None, "adapterCheck": exc.message})
        raise
    emit(event)
    for old in recoverable_steps(state_dir)[: -cfg.keep_recoverable]:
        shutil.rmtree(state_path(state_dir, old) / "state", ignore_errors=True)
    return adapter
