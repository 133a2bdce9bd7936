"""The supervised loop: settings → build → loop → save (STYLE.md 1).

Every conversation trains every epoch, in an order shuffled per epoch from the seed,
so the order of any update follows from its number alone and a resumed run sees the
same rows in the same order (behaviours.md 6). An update packs ``micro_batch``
conversations per pass for ``gradient_accumulation`` passes; its loss is the summed
token loss over the whole update divided by its supervised tokens (behaviours.md 1).
Events leave through ``emit`` as JSON-serialisable dicts (no HTTP here, STYLE.md 6).

This module owns the loop; which rows an update holds is :mod:`akka_optimize.engine.sft_order`,
saving and what a resume must keep :mod:`akka_optimize.engine.snapshots`, and the loop's
``phase`` events :mod:`akka_optimize.engine.phases`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..data.types import Example
from .config import EngineConfig
from .distributed import any_rank
from .errors import EngineError
from .phases import end_phase, training_phase
from .sanity import first_loss_warning, start_warnings
from .session.training import TrainingSession
from .sft_order import passes_of
from .sft_order import total_updates as total_updates
from .sft_order import update_passes as update_passes
from .sft_order import update_rows as update_rows
from .snapshots import BRANCH_SETTINGS, ORDER_SETTINGS, save_snapshot
from .snapshots import recoverable_steps as recoverable_steps
from .snapshots import state_path as state_path
from .start_checks import StartCheckFailed, start_checks

Emit = Callable[[dict[str, Any]], None]
_DEFAULTS = {f.name: f.default for f in fields(EngineConfig)}
"""Defaults of the settings, for states saved before a setting existed (``ranks``)."""


@dataclass
class SftResult:
    """How a call to :func:`run_sft` ended.

    Attributes:
        step: last completed update; total_steps: updates in the whole run.
        stopped: True when it stopped early (``stop_after_step`` / ``should_stop``) after saving.
        final_loss: loss of the last update (``finalLoss``); mean_loss: mean over every
            update of the run, resumed attempts included (``meanLoss``).
        last_save_step, adapter_dir: the newest save and its verified PEFT adapter.
        epoch_adapters: ``{"epoch", "step", "adapterDir"}`` per epoch end with saveEachEpoch.
        final_validation_loss: the last validation loss measured, if any.
        adapted_modules: module names that received a LoRA pair.
        checks: the checks before the first update, each value against its bound (None:
            none ran; :mod:`akka_optimize.engine.start_checks`).
    """

    step: int
    total_steps: int
    stopped: bool
    final_loss: float | None
    mean_loss: float | None
    last_save_step: int | None
    adapter_dir: Path | None
    adapted_modules: list[str]
    final_validation_loss: float | None = None
    epoch_adapters: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] | None = None


def run_sft(
    cfg: EngineConfig,
    model_dir: Path,
    train: list[Example],
    validation: list[Example] | None,
    state_dir: Path,
    emit: Emit,
    *,
    resume_step: int | None = None,
    branch: bool = False,
    init_adapter: Path | None = None,
    stop_after_step: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    until: Callable[[TrainingSession, int, int], bool] | None = None,
) -> SftResult:
    """Train a LoRA adapter on ``train`` and save it under ``state_dir``.

    Args:
        resume_step: continue from the training state saved at this step.
        branch: the state at ``resume_step`` is another run's (seeds/000 "Parameter
            sweeps"): this run continues it under its own settings (learning rate,
            schedule, weight decay, epochs, max steps…) and trains only the updates after
            ``resume_step``, its learning-rate schedule running over those updates; the
            settings that decide which rows an update holds (:data:`BRANCH_SETTINGS`)
            must match, and its loss log starts empty.
        init_adapter: a PEFT adapter folder whose weights the adapter starts from
            (``warmStartModelId``); ignored when resuming (the state holds the adapter).
        stop_after_step: save and stop after this update (a pause).
        should_stop: polled after each update; True saves and stops (pause or cancel).
        until: called after each update as ``until(session, update, total)``; True saves
            and ends the run there as finished, not stopped (the smoke check's
            :class:`akka_optimize.engine.smoke.SmokeMeter`).

    Events: ``phase``, ``metrics`` (per update), ``validation``, ``save``, and a
    ``warning`` when a fresh run's first loss is implausible (engine/sanity.py).

    Raises:
        EngineError: rows without a supervised token, a resume that changes the order
            settings or the data, a branch with no update after ``resume_step``, a
            non-finite loss. EngineOutOfMemory: see its sentence.
        AdapterCheckError: a saved adapter does not load onto the base model; the
            save keeps its training state but no adapter.
    """
    # ---- settings
    _refuse_unsupervised(train, "train")
    if validation:
        _refuse_unsupervised(validation, "validation")
    total = total_updates(cfg, len(train))

    # ---- build
    session, log = start_session(
        cfg, model_dir, state_dir, len(train), total, emit, resume_step, branch, init_adapter
    )
    result = SftResult(0, total, False, None, None, None, None, session.adapted_modules)
    fresh = resume_step is None and init_adapter is None
    result.checks = _start_checks(session, cfg, train, fresh, emit)  # F096
    if validation and cfg.validate_each_epoch and session.step == 0:
        log["validation"] = _validate(session, validation, cfg, 0, emit)

    # ---- loop
    for update in range(session.step + 1, total + 1):
        epoch, epoch_end = _train_update(session, cfg, train, update, log, emit, resume_step)
        if validation and validation_due(cfg, update, total, epoch_end):
            log["validation"] = _validate(session, validation, cfg, update, emit)

        ends = UpdateEnd(model_dir, state_dir, len(train), stop_after_step, should_stop, until)
        if ends.after(session, cfg, result, log, emit, update, total, epoch, epoch_end):
            break

    # ---- result
    return finish_run(result, session, log, emit)


@dataclass(frozen=True)
class UpdateEnd:
    """What a loop does after each update (the supervised and the preference loop alike):
    ask ``until`` whether the run is done, poll ``should_stop`` (or stop at
    ``stop_after_step``), save when due (:func:`_save_due`) and note the save."""

    model_dir: Path
    state_dir: Path
    rows: int
    stop_after_step: int | None
    should_stop: Callable[[], bool] | None
    until: Callable[[TrainingSession, int, int], bool] | None

    def after(
        self,
        session: TrainingSession,
        cfg: EngineConfig,
        result: SftResult,
        log: dict[str, Any],
        emit: Emit,
        update: int,
        total: int,
        epoch: int,
        epoch_end: bool,
    ) -> bool:
        """Run the end of ``update``; True when the loop ends here (``result.stopped`` set
        when it stopped early)."""
        done = self.until is not None and self.until(session, update, total)
        stop = self.stop_after_step
        stopping = not done and _stop_due(update, total, stop, self.should_stop, session)
        if _save_due(cfg, update, total, epoch_end, done or stopping):
            adapter = save_snapshot(
                session, cfg, self.model_dir, self.state_dir, epoch, epoch_end, self.rows, log,
                emit,
            )  # fmt: skip
            _note_save(result, cfg, update, epoch, epoch_end, adapter)
        result.stopped = stopping
        return bool(done or stopping)


CHECKING = "checks before the first update"
"""The phase detail a run shows while it checks itself (:mod:`akka_optimize.engine.start_checks`)."""


def _start_checks(
    session: TrainingSession, cfg: EngineConfig, train: list[Example], fresh: bool, emit: Emit
) -> list[dict[str, Any]] | None:
    """The checks before the first update on the first update's first conversations (at
    least two, at most one pass's worth); emits a ``phase`` event first, and a ``checks``
    event with every value when one fails (then re-raised). None when the
    settings have none (``checks.start`` false, one device) or the run has trained."""

    if cfg.start_checks is None or session.step != 0:
        return None
    emit({"type": "phase", "phase": "checking", "step": 0, "detail": CHECKING})
    rows = update_rows(train, cfg, 1)[: max(2, cfg.micro_batch)]
    try:
        return start_checks(session, rows, cfg.start_checks or {}, fresh)
    except StartCheckFailed as failed:  # the values reach the run before its failure
        emit({"type": "checks", "checks": failed.checks})
        raise


def _stop_due(
    update: int,
    total: int,
    stop_after_step: int | None,
    should_stop: Callable[[], bool] | None,
    session: TrainingSession,
) -> bool:
    """Whether the run saves and stops after ``update`` (a pause or cancel): never after
    its last update; at ``stop_after_step``, or when ``should_stop`` (polled only then)
    says so. On several ranks rank 0 hears the service, and every rank stops together."""
    due = update < total and (update == stop_after_step or bool(should_stop and should_stop()))
    return any_rank(due) if session.world > 1 else due


def _save_due(cfg: EngineConfig, update: int, total: int, epoch_end: bool, ending: bool) -> bool:
    """Whether a snapshot is saved after ``update``: the last update, a run ``ending`` there
    (finished by ``until`` or stopping), every ``save_every_steps``, and each epoch's end
    with ``save_each_epoch``."""
    every = cfg.save_every_steps and update % cfg.save_every_steps == 0
    return bool(update == total or ending or every or (cfg.save_each_epoch and epoch_end))


def finish_run(
    result: SftResult, session: TrainingSession, log: dict[str, Any], emit: Emit
) -> SftResult:
    """Fill ``result`` from the session and the loss log, emit the last ``phase`` event
    (:func:`end_phase`) and return it."""
    result.step = session.step
    result.final_loss = log["last"]
    result.mean_loss = log["loss_sum"] / log["count"] if log["count"] else None
    result.final_validation_loss = log["validation"]
    emit(end_phase(result))
    return result


def validation_due(cfg: EngineConfig, update: int, total: int, epoch_end: bool) -> bool:
    """Whether the validation set is scored after ``update``: every
    ``validation_frequency_steps``, at each epoch's end with ``validate_each_epoch``, and
    always after the last update (a run given a validation set always ends measured)."""
    freq = cfg.validation_frequency_steps
    return bool(
        (freq and update % freq == 0) or (cfg.validate_each_epoch and epoch_end) or update == total
    )


def start_session(
    cfg: EngineConfig,
    model_dir: Path,
    state_dir: Path,
    rows: int,
    total: int,
    emit: Emit,
    resume_step: int | None,
    branch: bool,
    init_adapter: Path | None,
) -> tuple[TrainingSession, dict[str, Any]]:
    """Load the model, then restore a resumed or branched state or warm-start the adapter.

    Emits ``loading_model`` and then ``training`` (with ``totalSteps`` and
    ``adaptedModules``). Returns the session and the loss log the loop goes on with (the
    saved one on a resume; a fresh one on a branch or a new run).

    Raises:
        EngineError: a branch whose plan ends at or before ``resume_step``; what
            :func:`_resume` raises.
    """
    log: dict[str, Any] = {"loss_sum": 0.0, "count": 0, "last": None, "validation": None}
    emit({"type": "phase", "phase": "loading_model", "step": resume_step or 0})
    random.seed(cfg.seed)
    session = TrainingSession(model_dir, cfg, total_updates=total)
    for warning in start_warnings(session.device.type, session.dtype):
        emit(warning)
    if resume_step is not None:
        if branch and total <= resume_step:
            raise EngineError(
                f"the branch trains no update after step {resume_step}: its plan ends at "
                f"update {total}; raise config.hyperparams.training.epochs or maxSteps.",
                code="branch_too_short",
                field="config.hyperparams.training.epochs",
            )
        saved_log = _resume(session, cfg, state_dir, resume_step, rows, branch)
        if branch:  # its own schedule over its own updates; its own loss log
            session.schedule_start = resume_step
        else:
            log = saved_log
    elif init_adapter is not None:
        session.load_adapter_weights(init_adapter)
    emit(training_phase(session, total))
    return session, log


def _train_update(
    session: TrainingSession,
    cfg: EngineConfig,
    train: list[Example],
    update: int,
    log: dict[str, Any],
    emit: Emit,
    resume_step: int | None,
) -> tuple[int, bool]:
    """Train update ``update`` (1-based) on its passes, emit its ``metrics`` (and, on a
    fresh run's first update, the first-loss ``warning`` of rule 10) and add its loss to
    ``log``. Returns ``(epoch, epoch_end)``."""
    epoch, epoch_end, passes = update_passes(train, cfg, update, session.rank, session.world)
    session.train_update_passes(passes)
    metrics = session.optim_step()
    emit({"type": "metrics", "epoch": epoch, **metrics})
    if update == 1 and resume_step is None:  # a fresh run's first update (rule 10)
        warning = first_loss_warning(metrics["loss"], session.vocab_size)
        if warning:
            emit(warning)
    log["loss_sum"] += metrics["loss"]
    log["count"] += 1
    log["last"] = metrics["loss"]
    return epoch, epoch_end


def _note_save(
    result: SftResult, cfg: EngineConfig, update: int, epoch: int, epoch_end: bool, adapter: Path
) -> None:
    """Record a save in the result: the last saved step and adapter, and per-epoch adapters
    when ``save_each_epoch`` keeps one at each epoch's end."""
    result.last_save_step, result.adapter_dir = update, adapter
    if cfg.save_each_epoch and epoch_end:
        result.epoch_adapters.append({"epoch": epoch, "step": update, "adapterDir": str(adapter)})


def _refuse_unsupervised(rows: list[Example], name: str) -> None:
    if not rows:
        raise EngineError(f"the {name} set has no rows.", code="no_rows")
    bad = [ex.row for ex in rows if not any(ex.weights[1:])]
    if bad:
        raise EngineError(
            f"{len(bad)} {name} row(s) have no supervised token (rows {bad[:10]}); "
            "refusing a silent 0 loss.",
            code="no_supervised_tokens",
        )


def _resume(
    session: TrainingSession,
    cfg: EngineConfig,
    state_dir: Path,
    step: int,
    rows: int,
    branch: bool = False,
) -> dict:
    meta = session.load_state(state_path(state_dir, step) / "state")
    saved = meta["config"]
    fixed = BRANCH_SETTINGS if branch else ORDER_SETTINGS
    changed = [k for k in fixed if saved.get(k, _DEFAULTS.get(k)) != getattr(cfg, k)]
    if changed or meta["cursor"].get("rows") != rows:
        what = ", ".join(f"{k} {saved.get(k)} → {getattr(cfg, k)}" for k in changed)
        what = what or f"{meta['cursor'].get('rows')} → {rows} rows"
        if branch:
            why = "a branch keeps which rows each update holds"
        else:
            why = "a resume continues the same run with its own settings"
        raise EngineError(
            f"the training state at step {step} was saved with other settings ({what}); {why}.",
            code="resume_mismatch",
        )
    return dict(meta["cursor"]["log"])


def _validate(
    session: TrainingSession, rows: list[Example], cfg: EngineConfig, step: int, emit: Emit
) -> float:
    """Token-weighted loss over the whole validation set (seeds/001 "Validate …"), in calls
    of ``validationBatchSize`` conversations (every rank scores every call)."""
    emit({"type": "phase", "phase": "validating", "step": step})
    per_call = cfg.validation_batch or (  # validationBatchSize; one call on one device
        cfg.conversations_per_update if cfg.ranks > 1 else len(rows)
    )
    loss_sum, supervised = 0.0, 0
    for start in range(0, len(rows), per_call):
        res = session.forward(passes_of(rows[start : start + per_call], cfg))
        loss_sum, supervised = loss_sum + res.loss_sum, supervised + res.supervised_tokens
    loss = loss_sum / supervised
    emit(
        {
            "type": "validation",
            "step": step,
            "loss": loss,
            "perplexity": math.exp(min(loss, 700.0)),
            "supervisedTokens": supervised,
        }
    )
    return loss
