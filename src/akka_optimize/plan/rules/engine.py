"""Plan rules on the training engine: each stated engine setting, and the attention and
Liger kernels a model may use.

Sources: seeds/001 "Set the training engine's settings directly" (not on a supervised
run on one device; Liger only on Gemma 4 E2B/E4B), "Flex attention for Gemma 4".
"""

from __future__ import annotations

import difflib
from typing import Any

from ...engine_settings import BY_KEY, LIGER_KEYS, coerce
from ..environment import PlanEnvironment
from ..refusals import Refusals
from ..schema.run import RunPlan
from .facts import Facts


def check_engine_keys(plan: RunPlan, env: PlanEnvironment, facts: Facts, out: Refusals) -> None:
    """Each stated engine setting: declared, for this loop, allowed, in bounds."""
    stated = plan.config.engineSettings or {}
    policy = env.deployment.engineSettings
    loop = "rl" if facts.method == "rl" else "sft"
    for key, value in stated.items():
        path = f"config.engineSettings.{key}"
        setting = BY_KEY.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, list(BY_KEY), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            out.add(
                path,
                f"{path}: {key!r} is not an engine setting.{hint} "
                "`config-schema --field config.engineSettings` lists them.",
                value,
            )
            continue
        if facts.sft_single:
            out.add(
                path,
                f"{path}: engine settings cannot be set on a preference run."
                if facts.method == "dpo"
                else f"{path}: engine settings cannot be set on a supervised run on one "
                "device (execution.gpus 1).",
                value,
            )
            continue
        if loop not in setting.loops:
            which = "a reinforcement run" if setting.loops == ("rl",) else "a supervised run"
            out.add(path, f"{path} applies to {which} only.", value)
            continue
        if not policy.allows(key):
            out.add(path, f"{path} is not an engine setting this deployment allows.", value)
            continue
        _, why = coerce(setting, value)
        if why:
            limit = [setting.minimum, setting.maximum] if setting.type in (int, float) else None
            out.add(path, f"{path} {why}.", value, limit or list(setting.choices or ()) or None)


def check_model_kernels(
    plan: RunPlan, resolved: dict[str, Any], facts: Facts, out: Refusals
) -> None:
    """flex_attention (Gemma 4 E2B/E4B/12B, several devices, padding) and Liger kernels."""
    engine = resolved["config"]["engineSettings"]
    stated = plan.config.engineSettings or {}
    model = facts.entry.repository if facts.entry else plan.baseModel
    attn_path = "config.model.attentionImplementation"
    if resolved["config"]["model"]["attentionImplementation"] == "flex_attention":
        if facts.entry is not None and not facts.entry.flex_attention_allowed:
            out.add(
                attn_path,
                f"{attn_path} flex_attention is for Gemma 4 E2B, E4B and 12B; {model} is "
                "another model type.",
                "flex_attention",
            )
        elif not (facts.method == "sft" and facts.multi):
            out.add(
                attn_path,
                f"{attn_path} flex_attention is for a supervised run on more than one device.",
                "flex_attention",
            )
        if engine.get("engine.pad_to_length") is False:
            p = "config.engineSettings.engine.pad_to_length"
            out.add(p, f"{p} cannot be false with flex_attention, which pads each pass.", False)
        bucket = engine.get("engine.pad_to_length_bucket")
        if isinstance(bucket, int) and bucket < 128:
            p = "config.engineSettings.engine.pad_to_length_bucket"
            out.add(
                p,
                f"{p} {bucket} is below 128, the smallest bucket flex_attention takes.",
                bucket,
                128,
            )
        tokens = (
            resolved["config"]["hyperparams"]["training"]["tokensPerGpu"]
            if facts.method == "sft"
            else None
        )
        limit = facts.qualified_limit
        if tokens and limit and isinstance(bucket, int) and bucket >= 1:
            padded = -(-tokens // bucket) * bucket
            if padded > limit and not out.has("config.hyperparams.training.tokensPerGpu"):
                p = "config.hyperparams.training.tokensPerGpu"
                out.add(
                    p,
                    f"{p} {tokens} pads to {padded} tokens with flex_attention (bucket {bucket}), "
                    f"above {limit}, the limit {model} was qualified at on {facts.profile.name}.",
                    tokens,
                    limit,
                )
    for key in LIGER_KEYS:
        if stated.get(key) is True and (facts.entry is None or not facts.entry.liger_verified):
            p = f"config.engineSettings.{key}"
            out.add(
                p,
                f"{p}: the Liger kernel {key} is verified for Gemma 4 E2B and E4B only, not for "
                f"{model}.",
                True,
            )
