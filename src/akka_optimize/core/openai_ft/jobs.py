"""Creating a fine-tuning job: OpenAI's ``POST /v1/fine_tuning/jobs`` body → a run plan.

A job is a run of this platform (:func:`akka_optimize.jobs.supervised.start_run`), its plan
visible with ``training runs get``; its OpenAI fields (suffix, metadata, files, the resolved
method) are kept in the run's ``results.openaiJob`` (not shown in the run's view). The job's
ID is ``ftjob-RUN``. Every field is honoured or refused with a 400 naming it in OpenAI's
shape; the plan's own refusals are renamed to the OpenAI field that set them
(:data:`.hyper.PARAMS`). The dry run of the plan and the start share one check
(:func:`akka_optimize.jobs.admission.admit`, called by ``start_run``).

Methods: :data:`METHODS` maps ``method.type`` to the function that builds its plan:
``supervised`` a supervised run (``config.method: sft``), ``dpo`` a preference run
(``config.method: dpo``, ``dpoHyperparams``; the sigmoid DPO loss with OpenAI's ``beta``),
``reinforcement`` a reinforcement run whose reward is the grader.
"""

from __future__ import annotations

import random
import re
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ...errors import AkkaError
from ...jobs.context import JobContext
from ...registry.bundles import register_bundle
from . import hyper
from .bundle import has_model_grader, reward_bundle
from .errors import OpenAIError, from_platform
from .file_store import find_file, pinned_of
from .grading import GraderError, check_grader

BODY_FIELDS = (
    "model",
    "training_file",
    "validation_file",
    "suffix",
    "seed",
    "metadata",
    "hyperparameters",
    "method",
    "integrations",
)
GRADER_BUNDLE = "openai-grader"
"""The bundle (in the job's project) whose versions are reinforcement jobs' graders."""
_SUFFIX = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def _check_metadata(m: Any) -> dict[str, str]:
    if m is None:
        return {}
    if not isinstance(m, dict) or len(m) > 16:
        raise OpenAIError("metadata must be an object of at most 16 string pairs.", "metadata")
    for k, v in m.items():
        if not isinstance(v, str) or len(k) > 64 or len(v) > 512:
            raise OpenAIError(
                f"metadata.{k}: keys are at most 64 characters and values strings of at most 512.",
                f"metadata.{k}",
            )
    return dict(m)


def _method(body: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """``(type, the method's object, the hyperparameters' param path)``."""
    m = body.get("method")
    if m is None:
        return "supervised", {"hyperparameters": body.get("hyperparameters")}, "hyperparameters"
    if not isinstance(m, dict) or m.get("type") not in METHODS:
        got = m.get("type") if isinstance(m, dict) else m
        raise OpenAIError(
            f"method.type {got!r} is not one of supervised, dpo, reinforcement.", "method.type"
        )
    kind = m["type"]
    for k in set(m) - {"type", kind}:
        raise OpenAIError(f"method.{k} does not belong to a {kind} method.", f"method.{k}")
    if body.get("hyperparameters") not in (None, {}):
        raise OpenAIError(
            "hyperparameters (deprecated) and method both given; give them in "
            f"method.{kind}.hyperparameters.",
            "hyperparameters",
        )
    inner = m.get(kind) or {}
    if not isinstance(inner, dict):
        raise OpenAIError(f"method.{kind} must be an object.", f"method.{kind}")
    return kind, inner, f"method.{kind}.hyperparameters"


def _supervised(
    ctx: JobContext, s: Session, job: dict[str, Any], inner: dict[str, Any]
) -> dict[str, Any]:
    for k in set(inner) - {"hyperparameters"}:
        raise OpenAIError(f"method.supervised.{k} is not a field here.", f"method.supervised.{k}")
    training: dict[str, Any] = {"seed": job["seed"]}
    if job["validation_file"] is not None:  # valid_loss after each epoch, as OpenAI reports it
        training["validateEachEpoch"] = True
    return {"method": "sft", "hyperparams": {"training": training}}


def _dpo(ctx: JobContext, s: Session, job: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    for k in set(inner) - {"hyperparameters"}:
        raise OpenAIError(f"method.dpo.{k} is not a field here.", f"method.dpo.{k}")
    # OpenAI's DPO is the sigmoid loss; a validation file is scored after the last update
    # (dpoHyperparams.validationFrequencySteps 0), its loss the checkpoint's full_valid_loss
    return {"method": "dpo", "dpoHyperparams": {"seed": job["seed"], "lossTypes": ["sigmoid"]}}


def _reinforcement(
    ctx: JobContext, s: Session, job: dict[str, Any], inner: dict[str, Any]
) -> dict[str, Any]:
    for k in set(inner) - {"hyperparameters", "grader"}:
        raise OpenAIError(
            f"method.reinforcement.{k} is not a field here.", f"method.reinforcement.{k}"
        )
    g = inner.get("grader")
    try:
        check_grader(g, "method.reinforcement.grader")
    except GraderError as exc:
        raise OpenAIError(exc.message, exc.param) from None
    if job["validation_file"] is not None:
        raise OpenAIError(
            "validation_file is not used by a reinforcement job here (it is not evaluated while "
            "it trains); leave it out.",
            "validation_file",
        )
    job["grader"] = g

    rollout = ctx.deployment().openaiFineTuning
    rl = {"seed": job["seed"], "reward": _reward(ctx, s, job["project"], g)}
    rl.update({k: v for k, v in rollout.model_dump().items() if v is not None})
    return {"method": "rl", "rlHyperparams": rl}


def _reward(ctx: JobContext, s: Session, project: str, g: dict[str, Any]) -> str:
    """The plan's ``rlHyperparams.reward`` for grader ``g``: a bundle of it, or the judge of
    a lone ``score_model`` grader (:mod:`.bundle`)."""
    param = "method.reinforcement.grader"
    if g["type"] == "score_model":
        return f"model:{g['model']}"
    if has_model_grader(g):
        raise OpenAIError(
            f"{param}: a {g['type']} grader holding a model grader cannot be a reward here (the "
            "grader sandbox has no network); use a lone score_model grader, or string_check, "
            "text_similarity, python and multi.",
            param,
            "unsupported_grader",
        )

    with tempfile.TemporaryDirectory() as tmp:
        rv, _ = register_bundle(
            s, ctx.store, f"{project}/{GRADER_BUNDLE}", reward_bundle(g, Path(tmp) / "b")
        )
    return f"bundle:{project}/{GRADER_BUNDLE}:v{rv.version}#reward"


METHODS: dict[
    str, Callable[[JobContext, Session, dict[str, Any], dict[str, Any]], dict[str, Any]]
] = {
    "supervised": _supervised,
    "reinforcement": _reinforcement,
    "dpo": _dpo,
}
"""``method.type`` → the function building the plan's ``config`` (and checking the method)."""
_FILE_KIND = {"supervised": "supervised", "reinforcement": "reinforcement", "dpo": "dpo"}


def _file(s: Session, fid: Any, project: str, param: str, kind: str) -> tuple[str, int]:
    if not isinstance(fid, str):
        raise OpenAIError(f"{param} must be a file ID.", param)
    pinned, got = pinned_of(s, fid, project, param)
    if got != _FILE_KIND[kind]:
        raise OpenAIError(
            f"{param} {fid} holds {got} rows; a {kind} job trains on {_FILE_KIND[kind]} rows "
            "(see the file's status_details).",
            param,
            "invalid_file_format",
        )
    row, _ = find_file(s, fid, project, param)
    return pinned, int((row.metadata_ or {}).get("rows") or 0)


def rename_field(exc: AkkaError, hp_param: str) -> OpenAIError:
    params = {k: v.replace("hyperparameters", hp_param) for k, v in hyper.PARAMS.items()}
    err = from_platform(exc, params)
    if err.param and err.param.startswith(("config", "execution")):
        err.message = f"{err.message} (plan field {err.param}, set by this service)"
    if err.param == "model":
        err.code = "model_not_available"
    return err


def build_plan(
    ctx: JobContext, s: Session, project: str, body: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check ``body`` and build ``(raw plan, job record)``; the plan is not resolved yet.

    Raises:
        OpenAIError: the first field that cannot be honoured, by its OpenAI name.
    """
    if not isinstance(body, dict):
        raise OpenAIError("The body must be a JSON object.", None)
    for k in body:
        if k not in BODY_FIELDS:
            raise OpenAIError(f"{k} is not a field of a fine-tuning job.", k, "unknown_parameter")
    if body.get("integrations"):
        raise OpenAIError(
            "integrations (wandb) are not served here; the job's metrics are its events and "
            "`training runs metrics`.",
            "integrations",
            "unsupported_parameter",
        )
    for k in ("model", "training_file"):
        if not isinstance(body.get(k), str) or not body[k]:
            raise OpenAIError(f"{k} is required.", k, "missing_required_parameter")
    kind, inner, hp_param = _method(body)
    suffix = body.get("suffix")
    if suffix is not None and (not isinstance(suffix, str) or not _SUFFIX.fullmatch(suffix)):
        raise OpenAIError(
            "suffix must be 1 to 40 lower-case letters, digits, '-' or '_' (it names the "
            "registered model).",
            "suffix",
        )
    seed = body.get("seed")
    if seed is None:
        seed = random.randrange(2**31)
    elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**31 - 1:
        raise OpenAIError("seed must be an integer from 0 to 2147483647.", "seed")
    stated = hyper.check_hyperparameters(inner.get("hyperparameters"), kind, hp_param)
    key = uuid.uuid4().hex[:8]
    job = {
        "project": project,
        "model": body["model"],
        "training_file": body["training_file"],
        "validation_file": body.get("validation_file"),
        "suffix": suffix,
        "seed": seed,
        "metadata": _check_metadata(body.get("metadata")),
        "type": kind,
        "stated": stated,
        "legacy": body.get("method") is None,
        "hpParam": hp_param,
    }
    config = METHODS[kind](ctx, s, job, inner)  # the method's own checks come first
    config["dataset"], job["rows"] = _file(s, body["training_file"], project, "training_file", kind)
    if body.get("validation_file") is not None:
        pinned, _ = _file(s, body["validation_file"], project, "validation_file", kind)
        config["data"] = {"validationDataset": pinned}
    plan = {
        "kind": "run",
        "project": project,
        "baseModel": body["model"],
        "modelName": f"ft-{suffix or 'job'}-{key}",
        "submissionId": f"openai-ftjob-{key}",
        "config": config,
    }
    return plan, job
