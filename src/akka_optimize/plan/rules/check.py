"""The rules a parsed plan must pass before anything is queued, each adding refusals that
name the field by its full path and the value or ceiling.

Sources, rule by rule: seeds/000 "H100 support" (device profile, host memory, naming the
devices that qualify), "Endpoints reachable from your machine" (LoRA rank above what
endpoints load), "Smaller changes" (a missing project names the field); seeds/001
"Choose a run's memory settings", "Set the training engine's settings directly" (not on
a supervised run on one device; Liger only on Gemma 4 E2B/E4B), "A supervised run checks
itself before it trains" (bounds), "Flex attention for Gemma 4", "Other changes"
(``tokensPerGpu``, ``data.packing``, ``validationBatchSize``), "Project names".

This module owns the order the rules run in (:func:`check_all`); the rules themselves
live by concern in :mod:`.rules_identity`, :mod:`.rules_resources`, :mod:`.rules_engine`
and :mod:`.rules_training`, on the :class:`Facts` of :mod:`.rules_facts`, and every one
stays importable from here.
"""

from __future__ import annotations

from typing import Any

from ..environment import PlanEnvironment
from ..refusals import Refusals
from ..schema.run import RunPlan
from .engine import check_engine_keys, check_model_kernels
from .facts import Facts as Facts
from .identity import check_identity, check_loop_groups, check_smoke
from .resources import check_ceilings, check_memory
from .resources import check_device as check_device
from .training import check_bounds, check_supervised


def check_all(
    plan: RunPlan, resolved: dict[str, Any], env: PlanEnvironment, facts: Facts, out: Refusals
) -> None:
    """Run every rule, in field order, adding each refusal to ``out``."""
    check_identity(plan, env, facts, out)
    check_smoke(plan, facts, out)
    check_loop_groups(plan, facts, out)
    check_ceilings(resolved, env, facts, out)
    check_supervised(plan, resolved, facts, out)
    check_model_kernels(plan, resolved, facts, out)
    check_engine_keys(plan, env, facts, out)
    check_bounds(plan, resolved, out)
    check_memory(plan, env, facts, out)
    check_device(plan, env, facts, out)
