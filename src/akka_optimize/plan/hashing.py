"""The configuration hash: SHA-256 over the canonical JSON of the resolved training
configuration.

seeds/000 "Training parameters": "Every field is part of the configuration hash, so two
runs that trained the same way hash alike"; seeds/001: ``config.model.weightPrecision``
and ``config.engineSettings`` are part of it. Because the hash is taken over the
*resolved* plan (every default filled, references pinned), key order and explicitly
stated defaults do not change it, and every field that changes how the run trains does.

What is hashed (:func:`hashed_view`): ``baseModel``, ``warmStartModelId``,
``branchFrom``, ``smoke`` (and a smoke run's ``smokeCheck``), the whole resolved ``config`` (pinned dataset, every
hyperparameter, model loading, data, loss, every engine setting of the loop) and the
execution fields that change the computation: ``gpus`` (one device and several train
differently), ``engine``, ``memory`` and ``rollout``. Not hashed: ``project``,
``modelName`` and ``submissionId`` (where a result is filed, not how it trains),
``deviceProfile`` and ``hostMemoryGiB`` (which machine), and save retention
(``keepRecoverable``, ``keepAdapters``, ``saveEverySteps``, ``saveEachEpoch``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

HASH_VERSION = "akka-optimize/run-config/v1"
"""Prefix of the hashed text; bump when the hashed view changes shape."""

EXECUTION_HASHED = ("gpus", "engine", "memory", "rollout")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace, UTF-8 text, finite numbers only.

    Raises:
        ValueError: ``value`` holds NaN or infinity.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def hashed_view(resolved: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved plan the hash covers (see module docstring)."""
    ex = resolved.get("execution") or {}
    view = {
        "baseModel": resolved["baseModel"],
        "warmStartModelId": resolved.get("warmStartModelId"),
        "branchFrom": resolved.get("branchFrom"),
        "smoke": resolved.get("smoke", False),
        "config": resolved["config"],
        "execution": {k: ex.get(k) for k in EXECUTION_HASHED},
    }
    if resolved.get("smokeCheck") is not None:  # a smoke run's only: other hashes unchanged
        view["smokeCheck"] = resolved["smokeCheck"]
    return view


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 hex digest (64 lower-case hex characters) of :func:`hashed_view`."""
    text = HASH_VERSION + "\n" + canonical_json(hashed_view(resolved))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
