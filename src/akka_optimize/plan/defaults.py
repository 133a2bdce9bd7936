"""Defaults per loop: a field left out takes the default of the loop that runs.

seeds/000 "Training parameters": "Each field you leave out takes the default for the
loop that runs, so stating one field of optimizer under a reinforcement run does not
change the rest to supervised values." The supervised defaults suit a small model
(SmolLM2-135M, the default base model) on the CPU or one device; the reinforcement
defaults follow the group-relative loop of DATA-AND-TRAINING-RULES.md 1.2 (lower
learning rate, constant schedule, no adapter dropout).

Device-dependent defaults (``precision``, ``gradientCheckpointing``) follow the kind of
the device profile the run resolves to, not the machine answering the request. Memory
settings and engine-setting defaults come from the deployment file.
"""

from __future__ import annotations

from typing import Any

LORA_SFT: dict[str, Any] = {"rank": 16, "alpha": 32.0, "dropout": 0.05}
LORA_RL: dict[str, Any] = {"rank": 16, "alpha": 32.0, "dropout": 0.0}

OPTIMIZER_SFT: dict[str, Any] = {
    "kind": "adamw",
    "learningRate": 2e-4,
    "weightDecay": 0.0,
    "maxGradNorm": 1.0,
}
OPTIMIZER_RL: dict[str, Any] = {
    "kind": "adamw",
    "learningRate": 4e-5,
    "weightDecay": 0.0,
    "maxGradNorm": 1.0,
}

SCHEDULER_SFT: dict[str, Any] = {"kind": "cosine", "warmupRatio": 0.03, "minLearningRateRatio": 0.1}
SCHEDULER_RL: dict[str, Any] = {"kind": "constant", "warmupRatio": 0.0, "minLearningRateRatio": 1.0}

TRAINING_SFT: dict[str, Any] = {
    "epochs": 1,
    "microBatchPerGpu": 4,
    "gradientAccumulation": 1,
    "validationFrequencySteps": 0,
    "validateEachEpoch": False,
    "validationBatchSize": None,
    "tokensPerGpu": None,
    "seed": 42,
    "maxSteps": None,
}

RL_LOOP: dict[str, Any] = {
    "steps": 100,
    "promptsPerStep": 8,
    "samplesPerPrompt": 4,
    "maxNewTokens": 256,
    "temperature": 1.0,
    "lossFn": "importance_sampling",
    "lossAggregation": "token_mean",
    "advantageNormalization": "population_std",
    "rolloutCorrection": "none",
    "rolloutCorrectionCap": 3.0,
    "maxStaleness": 0,
    "reward": "builtin:math",
    "seed": 42,
}

DPO_LOOP: dict[str, Any] = {
    "beta": 0.1,
    "lossTypes": ["sigmoid"],
    "lossWeights": None,
    "labelSmoothing": 0.0,
    "epochs": 1,
    "microBatchPerGpu": 4,
    "gradientAccumulation": 1,
    "validationFrequencySteps": 0,
    "seed": 42,
    "maxSteps": None,
}
"""The preference loop's fields (TRL's DPOConfig defaults: beta 0.1, sigmoid). A null
``lossWeights`` resolves to one weight of 1 per loss type."""

OPTIMIZER_DPO: dict[str, Any] = {
    "kind": "adamw",
    "learningRate": 5e-5,
    "weightDecay": 0.0,
    "maxGradNorm": 1.0,
}
"""A preference run moves less than a supervised one (TRL's DPO examples use 5e-7 to 5e-6
on full weights; a LoRA adapter takes a larger rate)."""

SMOKE_CHECK: dict[str, Any] = {
    "rows": 8,
    "threshold": 0.9,
    "maxSteps": 100,
    "measureEverySteps": 5,
}
"""``smokeCheck`` of a smoke run (:mod:`akka_optimize.engine.smoke`)."""

MAX_SEQ_LENGTH = 2048
"""Default ``config.maxSeqLength``, capped by the base model's context."""

LOSS: dict[str, Any] = {
    "assistantTurns": "all",
    "trainOnToolCalls": True,
    "trainOnToolResults": False,
}

DATA: dict[str, Any] = {
    "validationDataset": None,
    "use_dynamic_bsz": True,
    "packing": False,
    "onTooLong": "refuse",
}

EXECUTION: dict[str, Any] = {
    "gpus": 1,
    "hostMemoryGiB": None,
    "engine": "transformers",
    "keepRecoverable": 1,
    "keepAdapters": 3,
    "saveEverySteps": 500,
    "saveEachEpoch": False,
}

FALLBACK_MEMORY: dict[str, Any] = {
    "execution.memory.offload.weights": False,
    "execution.memory.offload.optimizer": False,
    "execution.memory.offload.activations": False,
    "execution.memory.sharding": "full",
    "execution.rollout.memoryShare": 0.5,
    "config.model.weightPrecision": "fp32",
}
"""Memory defaults where the deployment file configures none."""


HYPERPARAMS_KEY = {"sft": "hyperparams", "rl": "rlHyperparams", "dpo": "dpoHyperparams"}
"""The ``config`` key of each method's hyperparameter groups."""


def hyperparams(method: str) -> dict[str, Any]:
    """The hyperparameter groups of ``method`` (``sft`` → ``hyperparams``, ``rl`` →
    ``rlHyperparams``, ``dpo`` → ``dpoHyperparams``), every field filled. Returns fresh
    dicts."""
    if method == "dpo":
        return {
            "lora": dict(LORA_RL),
            "optimizer": dict(OPTIMIZER_DPO),
            "scheduler": {"kind": "linear", "warmupRatio": 0.1, "minLearningRateRatio": 0.0},
            **{k: list(v) if isinstance(v, list) else v for k, v in DPO_LOOP.items()},
        }
    if method == "rl":
        return {
            "lora": dict(LORA_RL),
            "optimizer": dict(OPTIMIZER_RL),
            "scheduler": dict(SCHEDULER_RL),
            **RL_LOOP,
        }
    return {
        "lora": dict(LORA_SFT),
        "optimizer": dict(OPTIMIZER_SFT),
        "scheduler": dict(SCHEDULER_SFT),
        "training": dict(TRAINING_SFT),
    }


def model(device_kind: str, weight_precision: str) -> dict[str, Any]:
    """``config.model`` defaults on a ``cpu`` or ``cuda`` device profile."""
    cuda = device_kind == "cuda"
    return {
        "precision": "bf16" if cuda else "fp32",
        "weightPrecision": weight_precision,
        "gradientCheckpointing": cuda,
        "attentionImplementation": "sdpa",
    }
