"""Plan rules on a supervised run's loop and the engine's check bounds: ``tokensPerGpu``,
validation settings, ``data.packing``, and bounds that need the checks or packing on.

Sources: seeds/001 "A supervised run checks itself before it trains" (bounds), "Other
changes" (``tokensPerGpu``, ``data.packing``, ``validationBatchSize``).
"""

from __future__ import annotations

from typing import Any

from ...engine_settings import BY_KEY
from ..refusals import Refusals
from ..schema.run import RunPlan
from .facts import Facts


def check_supervised(plan: RunPlan, resolved: dict[str, Any], facts: Facts, out: Refusals) -> None:
    """tokensPerGpu, validation settings and data.packing of a supervised run."""
    if facts.method != "sft":
        return
    cfg = plan.config
    t = cfg.hyperparams.training if cfg.hyperparams and cfg.hyperparams.training else None
    data = resolved["config"]["data"]
    has_val = bool(data["validationDataset"])
    base = "config.hyperparams.training"
    if t is not None and t.tokensPerGpu is not None:
        p = f"{base}.tokensPerGpu"
        limit = facts.qualified_limit
        if not facts.multi:
            out.add(
                p,
                f"{p} cannot be set on a run on one device; it is the token budget of one pass "
                "on each of several devices.",
                t.tokensPerGpu,
            )
        elif limit is not None and t.tokensPerGpu > limit:
            model = facts.entry.repository if facts.entry else plan.baseModel
            out.add(
                p,
                f"{p} {t.tokensPerGpu} is above {limit}, the token limit {model}'s catalog "
                f"entry was qualified at on {facts.profile.name}.",
                t.tokensPerGpu,
                limit,
            )
    if t is not None and t.validationBatchSize is not None:
        p = f"{base}.validationBatchSize"
        if not has_val:
            out.add(
                p,
                f"{p} is set but the run has no validation dataset; set "
                "config.data.validationDataset or leave it out.",
                t.validationBatchSize,
            )
        elif not facts.multi:
            out.add(
                p,
                f"{p} applies to a supervised run on more than one device.",
                t.validationBatchSize,
            )
    if t is not None and not has_val:
        if t.validateEachEpoch:
            p = f"{base}.validateEachEpoch"
            out.add(p, f"{p} needs config.data.validationDataset.", True)
        if t.validationFrequencySteps:
            p = f"{base}.validationFrequencySteps"
            out.add(p, f"{p} needs config.data.validationDataset.", t.validationFrequencySteps)
    if t is not None and (t.microBatchPerGpu or 1) > 1 and data["use_dynamic_bsz"] is False:
        p = f"{base}.microBatchPerGpu"
        out.add(
            p,
            f"{p} {t.microBatchPerGpu} contradicts config.data.use_dynamic_bsz false, which "
            "trains one conversation per pass; set microBatchPerGpu to 1 (or leave it out), "
            "or use_dynamic_bsz to true to pack whole conversations up to the token budget.",
            t.microBatchPerGpu,
        )
    if cfg.data is not None and cfg.data.packing is not None and not facts.multi:
        out.add(
            "config.data.packing",
            "config.data.packing cannot be set on a supervised run on one device: there "
            "config.data.use_dynamic_bsz decides packing (true, the default: whole "
            "conversations packed best-fit decreasing up to config.maxSeqLength tokens per "
            "pass; false: one conversation per pass).",
            cfg.data.packing,
        )
    if cfg.data is not None and cfg.data.packing is True and facts.multi:
        why = (
            "it already packs whole conversations into each pass up to its token budget"
            if data["use_dynamic_bsz"]
            else "with config.data.use_dynamic_bsz false it trains one conversation per pass"
        )
        out.add(
            "config.data.packing",
            f"config.data.packing true is refused on a supervised run on more than one "
            f"device: {why}.",
            True,
        )


def check_bounds(plan: RunPlan, resolved: dict[str, Any], out: Refusals) -> None:
    """Check bounds need the checks on; packing and isolation bounds need packing."""
    stated = plan.config.engineSettings or {}
    engine = resolved["config"]["engineSettings"]
    checks_on = engine.get("checks.start", True)
    packs = resolved["config"]["data"]["use_dynamic_bsz"]
    for key, value in stated.items():
        setting = BY_KEY.get(key)
        if setting is None or setting.check_bound is None or value is None:
            continue
        p = f"config.engineSettings.{key}"
        if checks_on is False:
            out.add(
                p, f"{p} is a check bound, but config.engineSettings.checks.start is false.", value
            )
        elif setting.check_bound in ("packing", "isolation") and packs is False:
            out.add(
                p,
                f"{p} is a {setting.check_bound} bound, but config.data.use_dynamic_bsz is false "
                "(one conversation per pass, nothing packed).",
                value,
            )
