"""A run seen as OpenAI's fine-tuning objects: ``fine_tuning.job``, its events, its
checkpoints, and the ``ft:`` model names that lead back to registered versions.

State mapping (run state → job ``status``; seeds/000 run states):

=============  ===================  ====================================================
run            job status           why
=============  ===================  ====================================================
QUEUED         ``queued``           waiting for the scheduler or a device
PREPARING      ``validating_files`` the worker tokenizes and checks every row against
                                    the chat template (the files' format was checked at
                                    upload)
RUNNING        ``running``
PAUSED         ``paused``           (OpenAI's pause; the SDK's status literal lacks it)
SUCCEEDED      ``succeeded``        ``fine_tuned_model`` is set
FAILED         ``failed``           ``error`` holds the run's one-sentence reason
CANCELLED      ``cancelled``
=============  ===================  ====================================================

Names: a job's model is ``ft:BASE:SUFFIX:RUN`` (an empty SUFFIX when none was given), a
checkpoint's ``ft:BASE:SUFFIX:RUN:ckpt-step-N``; :func:`parse_ft_name` reads them back.
Metrics use OpenAI's names: ``train_loss`` (the update's token-weighted loss), ``valid_loss``
(a validation measurement), ``full_valid_loss`` (the last one, on the whole validation
file), and for reinforcement ``train_reward_mean`` (with min/max) from the grader. A dpo
job's ``train_loss``/``valid_loss`` are the mean pair loss (the sigmoid DPO loss), beside
its implicit rewards as TRL reports them (:data:`PAIR_METRICS`, ``train_`` or ``valid_``
prefixed): ``rewards_chosen``, ``rewards_rejected``, ``rewards_margin`` (β × the
policy/reference log-ratio of each answer, and their difference) and ``rewards_accuracy``
(the share of pairs whose preferred answer has the higher reward). Mean token accuracy is
not computed here, so it is not reported.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Run, RunMetric, Snapshot
from .errors import OpenAIError

STATUS = {
    "QUEUED": "queued",
    "PREPARING": "validating_files",
    "RUNNING": "running",
    "PAUSED": "paused",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
}
"""Run state → OpenAI job status (module table)."""
PREFIX = "ftjob-"
PAIR_METRICS = {
    "rewards/chosen": "rewards_chosen",
    "rewards/rejected": "rewards_rejected",
    "rewards/margin": "rewards_margin",
    "rewards/accuracy": "rewards_accuracy",
}
"""A preference run's reward metric (:data:`akka_optimize.engine.dpo.update.REWARD_KEYS`) → its
name after ``train_``/``valid_`` (module docstring)."""


def _ts(t: dt.datetime | None) -> int | None:
    if t is None:
        return None
    return int((t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp())


def record(run: Run) -> dict[str, Any] | None:
    """The job record of a run (None: the run is not a fine-tuning job)."""
    return (run.results or {}).get("openaiJob")


def ft_name(run: Run, step: int | None = None) -> str:
    """``ft:BASE:SUFFIX:RUN`` (plus ``:ckpt-step-N`` for a checkpoint)."""
    rec = record(run) or {}
    name = f"ft:{rec.get('model') or run.base_model}:{rec.get('suffix') or ''}:{run.id}"
    return name if step is None else f"{name}:ckpt-step-{step}"


def parse_ft_name(model: str) -> tuple[str, int | None] | None:
    """``(run ID, checkpoint step or None)`` of an ``ft:`` name; None for another name."""
    if not model.startswith("ft:"):
        return None
    parts = model.split(":")
    step = None
    if parts[-1].startswith("ckpt-step-") and parts[-1].removeprefix("ckpt-step-").isdigit():
        step = int(parts.pop().removeprefix("ckpt-step-"))
    return (parts[-1], step) if len(parts) >= 4 and parts[-1] else None


def job_id(run: Run) -> str:
    """``ftjob-RUN``."""
    return PREFIX + run.id


def run_id_of(jid: str) -> str:
    """The run ID of a job ID (404 in OpenAI's shape for another form)."""
    if not isinstance(jid, str) or not jid.startswith(PREFIX) or len(jid) == len(PREFIX):
        raise OpenAIError(f"No fine-tuning job {jid!r}.", "fine_tuning_job_id", "not_found", 404)
    return jid.removeprefix(PREFIX)


def job_view(run: Run) -> dict[str, Any]:
    """OpenAI's ``FineTuningJob`` of a run with a job record."""
    rec = record(run) or {}
    hp = rec.get("hyperparameters") or {}
    kind = rec.get("type", "supervised")
    method: dict[str, Any] = {"type": kind, kind: {"hyperparameters": hp}}
    if kind == "reinforcement":
        method[kind]["grader"] = rec.get("grader")
    error = None
    if run.state == "FAILED":
        error = {
            "code": "run_failed",
            "message": run.failure_reason or "The run failed.",
            "param": None,
        }
    done = run.state == "SUCCEEDED" and run.registered_model
    return {
        "id": job_id(run),
        "object": "fine_tuning.job",
        "created_at": _ts(run.created_at),
        "finished_at": _ts(run.finished_at),
        "error": error,
        "fine_tuned_model": ft_name(run) if done else None,
        "hyperparameters": {
            k: hp.get(k) for k in ("n_epochs", "batch_size", "learning_rate_multiplier")
        },
        "model": rec.get("model") or run.base_model,
        "organization_id": f"org-{run.project}",
        "result_files": [],
        "seed": rec.get("seed", 0),
        "status": STATUS.get(run.state, "failed"),
        "trained_tokens": (run.results or {}).get("totalTokens") if done else None,
        "training_file": rec.get("training_file"),
        "validation_file": rec.get("validation_file"),
        "estimated_finish": None,
        "integrations": [],
        "metadata": rec.get("metadata") or None,
        "method": method,
        "user_provided_suffix": rec.get("suffix"),
    }


def metrics_of(kind: str, values: dict[str, Any], step: int, total: int | None) -> dict[str, Any]:
    """One measurement under OpenAI's names (module docstring)."""
    out: dict[str, Any] = {"step": step}
    if total:
        out["total_steps"] = total
    side = "valid_" if kind == "validation" else "train_"
    out.update({side + v: values[k] for k, v in PAIR_METRICS.items() if k in values})
    if kind == "validation":
        out["valid_loss"] = values.get("loss")
        return out
    if "rewardMean" in values:
        out["train_reward_mean"] = values.get("rewardMean")
        out["train_reward_min"] = values.get("rewardMin")
        out["train_reward_max"] = values.get("rewardMax")
        out["reward_errors"] = values.get("rewardErrors")
    out["train_loss"] = values.get("loss")
    return out


def _event(
    eid: str,
    at: int | None,
    message: str,
    level: str = "info",
    data: Any = None,
    kind: str = "message",
) -> dict[str, Any]:
    return {
        "id": eid,
        "object": "fine_tuning.job.event",
        "created_at": at or 0,
        "level": level,
        "message": message,
        "data": data,
        "type": kind,
    }


def events(s: Session, run: Run) -> list[dict[str, Any]]:
    """The job's events, newest first: created, started, one ``metrics`` event per update
    and validation, the model registered, and how it ended."""
    out = [
        _event(
            f"ftevent-{run.id}-created",
            _ts(run.created_at),
            f"Created fine-tuning job: {job_id(run)}",
        )
    ]
    rec = record(run) or {}
    if (
        rec.get("type") == "reinforcement"
        and (rec.get("grader") or {}).get("type") == "score_model"
    ):
        out.append(
            _event(
                f"ftevent-{run.id}-judge",
                _ts(run.created_at),
                f"The score_model grader's model {rec['grader']['model']} scores each sample as "
                "this platform's judge: asked with its judge instructions, the row's reference "
                "fields and the answer, its reply read as a score over 10 (the grader's input "
                "messages are not sent).",
                "warn",
            )
        )
    if run.started_at:
        out.append(
            _event(f"ftevent-{run.id}-started", _ts(run.started_at), "Fine-tuning job started")
        )
    rows = s.scalars(
        select(RunMetric)
        .where(RunMetric.run_id == run.id, RunMetric.kind.in_(("metrics", "validation")))
        .order_by(RunMetric.id)
    ).all()
    for m in rows:
        data = metrics_of(m.kind, m.values or {}, m.step, run.total_steps)
        what = ", ".join(f"{k} {v:.4g}" for k, v in data.items() if isinstance(v, float))
        out.append(
            _event(
                f"ftevent-{run.id}-m{m.id}",
                _ts(m.created_at),
                f"Step {m.step}: {what}",
                data=data,
                kind="metrics",
            )
        )
    end = _ts(run.finished_at)
    if run.state == "SUCCEEDED" and run.registered_model:
        out.append(
            _event(
                f"ftevent-{run.id}-model",
                end,
                f"New fine-tuned model created: {ft_name(run)} (registered as {run.registered_model})",
            )
        )
        out.append(_event(f"ftevent-{run.id}-end", end, "The job has successfully completed"))
    elif run.state == "FAILED":
        out.append(
            _event(f"ftevent-{run.id}-end", end, f"The job failed: {run.failure_reason}", "error")
        )
    elif run.state == "CANCELLED":
        out.append(_event(f"ftevent-{run.id}-end", end, "The job was cancelled"))
    elif run.state == "PAUSED":
        out.append(
            _event(
                f"ftevent-{run.id}-paused",
                _ts(run.finished_at) or _ts(run.created_at),
                "The job was paused",
            )
        )
    out.reverse()
    return out


def checkpoints(s: Session, run: Run) -> list[dict[str, Any]]:
    """OpenAI's ``fine_tuning.job.checkpoint`` objects: the run's snapshots that kept an
    adapter, newest first, each with its step's metrics."""
    snaps = s.scalars(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.adapter_key.is_not(None))
        .order_by(Snapshot.step.desc())
    ).all()
    by_step: dict[int, dict[str, Any]] = {}
    for m in s.scalars(select(RunMetric).where(RunMetric.run_id == run.id).order_by(RunMetric.id)):
        if m.kind in ("metrics", "validation"):
            by_step.setdefault(m.step, {}).update(metrics_of(m.kind, m.values or {}, m.step, None))
    full = (run.results or {}).get("validationLoss")
    out = []
    for i, snap in enumerate(snaps):
        metrics = {
            "step": float(snap.step),
            **{k: v for k, v in by_step.get(snap.step, {}).items() if k != "step"},
        }
        if i == 0 and full is not None and run.state == "SUCCEEDED":
            metrics["full_valid_loss"] = full
        out.append(
            {
                "id": f"ftckpt-{run.id}-{snap.step}",
                "object": "fine_tuning.job.checkpoint",
                "created_at": _ts(snap.created_at),
                "fine_tuned_model_checkpoint": ft_name(run, snap.step),
                "fine_tuning_job_id": job_id(run),
                "metrics": metrics,
                "step_number": snap.step,
            }
        )
    return out
