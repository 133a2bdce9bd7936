"""What an evaluation request is: the run methods, the defaults and :class:`EvalRequest`.

The lowest layer of the ``eval`` and ``compare`` kinds (:mod:`akka_optimize.evals.kind`):
names and values every part of them shares, and the validated request that
:func:`akka_optimize.evals.kind.start_evaluation` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

METHOD = "eval"
"""The run ``method`` of an evaluation."""

COMPARE = "compare"
"""The run ``method`` of a comparison (two models, one dataset, one grader)."""

MAX_ERROR_SHARE = 0.5
"""An evaluation whose example errors (grader raised, hung, exceeded a limit, returned a
non-number) exceed this share of its examples fails, with one sentence; below it, it
succeeds and reports the error count beside the mean."""

DEFAULT_SAMPLING = {"temperature": 0.0, "topP": 1.0, "maxTokens": 256, "seed": 0}
"""Sampling of the answers when the request leaves a setting out: greedy, 256 tokens."""


@dataclass(frozen=True)
class EvalRequest:
    """A validated ``POST /v1/training/evaluations`` body, its model already resolved.

    Attributes:
        project: the project the evaluation belongs to (the candidate's, or ``--project``).
        model: the resolved model version (:class:`akka_optimize.registry.ResolvedVersion`).
        base_key: the base model's catalog key (``ns/name:vN``) the worker loads.
        dataset / grader / grader_instructions / sampling / limit: as given.
        raw: the request body as given (kept with the record).
        device_kind: ``cpu`` or ``cuda``: where the answers are generated (the deployment's
            default device profile, else CUDA when the service's machine has it).
        baseline: a comparison's baseline model version (None for an evaluation); it
            shares the candidate's base model.
        trigger: None for a request; ``registered`` for the evaluation a project's settings
            queue when a model version is registered (:mod:`akka_optimize.evals.settings`).
    """

    project: str
    model: Any
    base_key: str
    dataset: str
    grader: str
    grader_instructions: str | None
    sampling: dict[str, Any]
    limit: int | None
    raw: dict[str, Any]
    device_kind: str = "cpu"
    baseline: Any = None
    trigger: str | None = None
