"""A fine-tuning job's hyperparameters: OpenAI's names, ``"auto"``, and this platform's plan.

OpenAI's names and the plan fields they set (seeds/000 "Training parameters"):

=============================  ========================================================
OpenAI                         plan
=============================  ========================================================
``n_epochs``                   supervised: ``hyperparams.training.epochs``;
                               reinforcement: ``rlHyperparams.steps`` =
                               ceil(n_epochs × rows / batch_size)
``batch_size``                 supervised: ``training.microBatchPerGpu`` (gradient
                               accumulation 1); reinforcement: ``promptsPerStep``
``learning_rate_multiplier``   ``optimizer.learningRate`` = the platform's default
                               learning rate for the method × the multiplier
``seed``                       ``training.seed`` / ``rlHyperparams.seed``
``beta``                       (dpo: not on this service yet)
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
"""The hyperparameters OpenAI documents per method (the dpo row is for its later wiring)."""
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
    default_lr = float(
        first["config"]["hyperparams"]["optimizer"]["learningRate"]
        if method == "supervised"
        else first["config"]["rlHyperparams"]["optimizer"]["learningRate"]
    )
    cfg = plan["config"]
    if method == "supervised":
        tr = cfg.setdefault("hyperparams", {}).setdefault("training", {})
        if "n_epochs" in stated:
            tr["epochs"] = stated["n_epochs"]
        if "batch_size" in stated:
            tr["microBatchPerGpu"], tr["gradientAccumulation"] = stated["batch_size"], 1
        opt = cfg["hyperparams"].setdefault("optimizer", {})
    else:
        rl = cfg.setdefault("rlHyperparams", {})
        if "batch_size" in stated:
            rl["promptsPerStep"] = stated["batch_size"]
        per_step = rl.get("promptsPerStep") or first["config"]["rlHyperparams"]["promptsPerStep"]
        rl["steps"] = max(1, math.ceil(stated.get("n_epochs", 1) * rows / per_step))
        opt = rl.setdefault("optimizer", {})
    if "learning_rate_multiplier" in stated:
        opt["learningRate"] = default_lr * stated["learning_rate_multiplier"]
    return default_lr


def resolved(plan: dict[str, Any], method: str, rows: int, default_lr: float) -> dict[str, Any]:
    """OpenAI's hyperparameters as the resolved plan holds them (``"auto"`` resolved)."""
    cfg = plan["config"]
    if method == "supervised":
        h = cfg["hyperparams"]
        tr = h["training"]
        lr = h["optimizer"]["learningRate"]
        return {
            "n_epochs": tr["epochs"],
            "batch_size": tr["microBatchPerGpu"] * tr["gradientAccumulation"],
            "learning_rate_multiplier": round(lr / default_lr, 6),
        }
    rl = cfg["rlHyperparams"]
    return {
        "n_epochs": max(1, round(rl["steps"] * rl["promptsPerStep"] / max(rows, 1))),
        "batch_size": rl["promptsPerStep"],
        "learning_rate_multiplier": round(rl["optimizer"]["learningRate"] / default_lr, 6),
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
    "config.rlHyperparams.promptsPerStep": "hyperparameters.batch_size",
    "config.rlHyperparams.steps": "hyperparameters.n_epochs",
    "config.rlHyperparams.reward": "method.reinforcement.grader",
    "modelName": "suffix",
}
"""A plan refusal's field → the OpenAI field that set it (``hyperparameters.*`` is prefixed
with ``method.TYPE.`` when the job gave ``method``)."""
