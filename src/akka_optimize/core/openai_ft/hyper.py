"""A fine-tuning job's hyperparameters: OpenAI's names, ``"auto"``, and this platform's plan.

OpenAI's names and the plan fields they set (seeds/000 "Training parameters"):

=============================  ========================================================
OpenAI                         plan
=============================  ========================================================
``n_epochs``                   supervised: ``hyperparams.training.epochs``;
                               dpo: ``dpoHyperparams.epochs``;
                               reinforcement: ``rlHyperparams.steps`` =
                               ceil(n_epochs × rows / batch_size)
``batch_size``                 supervised: ``training.microBatchPerGpu``; dpo:
                               ``dpoHyperparams.microBatchPerGpu`` (pairs; gradient
                               accumulation 1 for both); reinforcement:
                               ``promptsPerStep``
``learning_rate_multiplier``   ``optimizer.learningRate`` = the platform's default
                               learning rate for the method × the multiplier
``seed``                       ``training.seed`` / ``dpoHyperparams.seed`` /
                               ``rlHyperparams.seed``
``beta``                       dpo: ``dpoHyperparams.beta`` (the sigmoid DPO loss)
``eval_interval``,             reinforcement: only ``"auto"`` (this service does not
``eval_samples``               evaluate a reinforcement run while it trains; returned null)
``compute_multiplier``         refused unless ``"auto"``; ``reasoning_effort`` unless
                               ``"default"``
=============================  ========================================================

``"auto"`` (or a missing value) is what the platform resolves by default; the job answers the
resolved values, as OpenAI does. Anything else is refused naming its OpenAI path.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import OpenAIError

FIELDS = {
    "supervised": ("n_epochs", "batch_size", "learning_rate_multiplier"),
    "reinforcement": (
        "n_epochs",
        "batch_size",
        "learning_rate_multiplier",
        "eval_interval",
        "eval_samples",
        "compute_multiplier",
        "reasoning_effort",
    ),
    "dpo": ("n_epochs", "batch_size", "learning_rate_multiplier", "beta"),
}
"""The hyperparameters OpenAI documents per method."""
GROUP = {"supervised": "hyperparams", "dpo": "dpoHyperparams", "reinforcement": "rlHyperparams"}
"""The plan's hyperparameter group of each method (``config.GROUP``)."""
LIMITS = {"n_epochs": (1, 50), "batch_size": (1, 256)}
"""Integer bounds (OpenAI's documented ranges)."""
AUTO_ONLY = {
    "eval_interval": "this service does not evaluate a reinforcement run while it trains",
    "eval_samples": "this service does not evaluate a reinforcement run while it trains",
    "compute_multiplier": "compute is what the run's plan claims on this service, not a multiplier",
}


def check_hyperparameters(h: Any, method: str, param: str) -> dict[str, Any]:
    """The stated hyperparameters (``"auto"`` dropped), checked.

    Raises:
        OpenAIError: naming ``param.FIELD`` for an unknown field, a value out of range or of
            the wrong type, or one this service cannot honour (:data:`AUTO_ONLY`).
    """
    if h is None:
        return {}
    if not isinstance(h, dict):
        raise OpenAIError(f"{param} must be an object.", param)
    out: dict[str, Any] = {}
    for k, v in h.items():
        p = f"{param}.{k}"
        if k not in FIELDS[method]:
            raise OpenAIError(
                f"{p} is not a hyperparameter of {method} (these are: {', '.join(FIELDS[method])}).",
                p,
                "unknown_parameter",
            )
        if v == "auto" or v is None or (k == "reasoning_effort" and v == "default"):
            continue
        if k in AUTO_ONLY:
            raise OpenAIError(
                f"{p} can only be 'auto' here: {AUTO_ONLY[k]}.", p, "unsupported_parameter"
            )
        if k == "reasoning_effort":
            raise OpenAIError(
                f"{p} {v!r} is refused: the models of this service have no reasoning effort.",
                p,
                "unsupported_parameter",
            )
        if k in LIMITS:
            lo, hi = LIMITS[k]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise OpenAIError(
                    f"{p} must be 'auto' or an integer from {lo} to {hi}, not {v!r}.", p
                )
        elif isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 100:
            raise OpenAIError(
                f"{p} must be 'auto' or a number above 0 (at most 100), not {v!r}.", p
            )
        out[k] = v
    return out


def apply(
    plan: dict[str, Any], method: str, stated: dict[str, Any], rows: int, first: dict[str, Any]
) -> float:
    """Write the stated hyperparameters into ``plan``'s config (module table) and return
    the method's default learning rate. ``rows`` is the training file's row count
    (reinforcement steps); ``first`` the plan resolved before (the platform's defaults)."""
    default_lr = float(first["config"][GROUP[method]]["optimizer"]["learningRate"])
    cfg = plan["config"]
    group = cfg.setdefault(GROUP[method], {})
    if method in ("supervised", "dpo"):
        loop = group.setdefault("training", {}) if method == "supervised" else group
        if "n_epochs" in stated:
            loop["epochs"] = stated["n_epochs"]
        if "batch_size" in stated:
            loop["microBatchPerGpu"], loop["gradientAccumulation"] = stated["batch_size"], 1
        if "beta" in stated:
            loop["beta"] = stated["beta"]
    else:
        if "batch_size" in stated:
            group["promptsPerStep"] = stated["batch_size"]
        per_step = group.get("promptsPerStep") or first["config"][GROUP[method]]["promptsPerStep"]
        group["steps"] = max(1, math.ceil(stated.get("n_epochs", 1) * rows / per_step))
    if "learning_rate_multiplier" in stated:
        opt = group.setdefault("optimizer", {})
        opt["learningRate"] = default_lr * stated["learning_rate_multiplier"]
    return default_lr


def resolved(plan: dict[str, Any], method: str, rows: int, default_lr: float) -> dict[str, Any]:
    """OpenAI's hyperparameters as the resolved plan holds them (``"auto"`` resolved)."""
    group = plan["config"][GROUP[method]]
    lrm = round(group["optimizer"]["learningRate"] / default_lr, 6)
    if method in ("supervised", "dpo"):
        loop = group["training"] if method == "supervised" else group
        out = {
            "n_epochs": loop["epochs"],
            "batch_size": loop["microBatchPerGpu"] * loop["gradientAccumulation"],
            "learning_rate_multiplier": lrm,
        }
        if method == "dpo":
            out["beta"] = loop["beta"]
        return out
    return {
        "n_epochs": max(1, round(group["steps"] * group["promptsPerStep"] / max(rows, 1))),
        "batch_size": group["promptsPerStep"],
        "learning_rate_multiplier": lrm,
        "eval_interval": None,
        "eval_samples": None,
        "compute_multiplier": None,
        "reasoning_effort": "default",
    }


PARAMS = {
    "baseModel": "model",
    "config.dataset": "training_file",
    "config.data.validationDataset": "validation_file",
    "config.hyperparams.training.epochs": "hyperparameters.n_epochs",
    "config.hyperparams.training.microBatchPerGpu": "hyperparameters.batch_size",
    "config.hyperparams.training.seed": "seed",
    "config.rlHyperparams.seed": "seed",
    "config.dpoHyperparams.seed": "seed",
    "config.dpoHyperparams.epochs": "hyperparameters.n_epochs",
    "config.dpoHyperparams.microBatchPerGpu": "hyperparameters.batch_size",
    "config.dpoHyperparams.beta": "hyperparameters.beta",
    "config.rlHyperparams.promptsPerStep": "hyperparameters.batch_size",
    "config.rlHyperparams.steps": "hyperparameters.n_epochs",
    "config.rlHyperparams.reward": "method.reinforcement.grader",
    "modelName": "suffix",
}
"""A plan refusal's field → the OpenAI field that set it (``hyperparameters.*`` is prefixed
with ``method.TYPE.`` when the job gave ``method``)."""
