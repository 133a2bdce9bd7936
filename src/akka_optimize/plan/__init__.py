"""Run plans: the descriptor schema, per-loop defaults, engine settings, refusals,
resolution and the configuration hash (DESIGN.md "Layout": ``plan/``).

Entry point: :func:`resolve_plan` (raw JSON + :class:`PlanEnvironment` →
:class:`ResolvedPlan`, or :class:`PlanRefused` listing every refusal).
"""

from .environment import CatalogEntryView, PlanEnvironment
from .refusals import PlanRefused, Refusal
from .resolve import ResolvedPlan, resolve_plan
from .schema.run import RunPlan

__all__ = [
    "CatalogEntryView",
    "PlanEnvironment",
    "PlanRefused",
    "Refusal",
    "ResolvedPlan",
    "RunPlan",
    "resolve_plan",
]
