"""The sampling settings of an evaluation's answers, shared by the evaluation, comparison
and project-settings bodies (declared with the request schemas, :mod:`akka_optimize.plan.pipeline`)."""

from __future__ import annotations

from ...plan.pipeline import Sampling

__all__ = ["Sampling"]
