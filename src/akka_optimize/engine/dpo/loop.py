"""The preference loop: settings → build → loop → save, as the supervised loop
(:mod:`akka_optimize.engine.sft`), over pairs instead of conversations (issue 50 item 3).

Every pair trains every epoch, in an order shuffled per epoch from the seed
(:func:`akka_optimize.engine.sft_order.update_rows`, a pair counting as one row), so a
resumed run sees the same pairs in the same order. An update holds ``micro_batch`` ×
``gradient_accumulation`` × ranks pairs; each rank trains a contiguous share of whole pairs
(:func:`akka_optimize.engine.distributed.rank_share`), ``micro_batch`` pairs per pass
(:mod:`akka_optimize.engine.dpo.update`). Loading, resuming, branching, warm starts, saves,
pause and cancel are the supervised loop's own.

Events: ``phase``, ``metrics`` per update (the supervised ones plus ``pairs`` and the
rewards of :data:`akka_optimize.engine.dpo.update.REWARD_KEYS`), ``validation`` (``loss``, the
rewards, ``pairs``) and ``save``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...data.types import PreferencePair
from ..config import EngineConfig
from ..distributed import rank_share
from ..errors import EngineError
from ..session.training import TrainingSession
from ..sft import (
    Emit,
    SftResult,
    UpdateEnd,
    finish_run,
    start_session,
    total_updates,
    update_rows,
    validation_due,
)
from .loss import DpoSettings
from .update import pair_passes, score_pairs, train_update


def run_dpo(
    cfg: EngineConfig,
    settings: DpoSettings,
    model_dir: Path,
    train: list[PreferencePair],
    validation: list[PreferencePair] | None,
    state_dir: Path,
    emit: Emit,
    *,
    resume_step: int | None = None,
    branch: bool = False,
    init_adapter: Path | None = None,
    should_stop: Callable[[], bool] | None = None,
    until: Callable[[TrainingSession, int, int], bool] | None = None,
) -> SftResult:
    """Train a LoRA adapter on preference ``train`` pairs and save it under ``state_dir``.

    Arguments as :func:`akka_optimize.engine.sft.run_sft`'s; ``settings`` is the loss.
    ``init_adapter`` (a warm start from an SFT model) also starts the policy there while the
    reference stays the base model with the adapter off.

    Returns:
        :class:`~akka_optimize.engine.sft.SftResult` (``final_loss``, ``mean_loss`` of the
        pair loss; ``final_validation_loss`` the last validation's mean pair loss).

    Raises:
        EngineError: no pair, a resume whose settings differ, a non-finite loss.
    """
    if not train:
        raise EngineError("the training set has no preference pair.", code="no_rows")
    cfg.extra["dpo"] = settings.to_dict()  # kept in saved state; a resume must match
    total = total_updates(cfg, len(train))
    session, log = start_session(
        cfg, model_dir, state_dir, len(train), total, emit, resume_step, branch, init_adapter
    )
    result = SftResult(0, total, False, None, None, None, None, session.adapted_modules)
    for update in range(session.step + 1, total + 1):
        epoch, epoch_end = _update(session, cfg, settings, train, update, log, emit)
        if validation and validation_due(cfg, update, total, epoch_end):
            log["validation"] = validate_pairs(session, settings, validation, update, emit)
        ends = UpdateEnd(model_dir, state_dir, len(train), None, should_stop, until)
        if ends.after(session, cfg, result, log, emit, update, total, epoch, epoch_end):
            break
    return finish_run(result, session, log, emit)


def _update(
    session: TrainingSession,
    cfg: EngineConfig,
    settings: DpoSettings,
    train: list[PreferencePair],
    update: int,
    log: dict[str, Any],
    emit: Emit,
) -> tuple[int, bool]:
    """Train update ``update`` on this rank's share of its pairs; emit its ``metrics``
    and add its loss to ``log``. Returns ``(epoch, epoch_end)``."""
    per_epoch = cfg.updates_per_epoch(len(train))
    share = rank_share(update_rows(train, cfg, update), session.rank, session.world)  # type: ignore[arg-type]
    metrics = train_update(session, pair_passes(share, cfg.micro_batch), settings)
    epoch, epoch_end = (update - 1) // per_epoch + 1, (update - 1) % per_epoch == per_epoch - 1
    emit({"type": "metrics", "epoch": epoch, **metrics})
    log["loss_sum"] += metrics["loss"]
    log["count"] += 1
    log["last"] = metrics["loss"]
    return epoch, epoch_end


def validate_pairs(
    session: TrainingSession,
    settings: DpoSettings,
    pairs: list[PreferencePair],
    step: int,
    emit: Emit,
) -> float:
    """Score every validation pair (no gradient, eval mode); emit a ``validation`` event
    with the mean pair ``loss``, the rewards and ``pairs``. Returns the loss."""
    emit({"type": "phase", "phase": "validating", "step": step})
    sums = score_pairs(session, pairs, settings, session.cfg.micro_batch)
    loss = sums.loss / max(sums.pairs, 1)
    emit(
        {
            "type": "validation",
            "step": step,
            "loss": loss,
            "pairs": sums.pairs,
            "supervisedTokens": sums.supervised,
            **sums.metrics(),
        }
    )
    return loss
