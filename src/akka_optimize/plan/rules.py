"""The rules a parsed plan must pass before anything is queued, each adding refusals that
name the field by its full path and the value or ceiling.

Sources, rule by rule: seeds/000 "H100 support" (device profile, host memory, naming the
devices that qualify), "Endpoints reachable from your machine" (LoRA rank above what
endpoints load), "Smaller changes" (a missing project names the field); seeds/001
"Choose a run's memory settings", "Set the training engine's settings directly" (not on
a supervised run on one device; Liger only on Gemma 4 E2B/E4B), "A supervised run checks
itself before it trains" (bounds), "Flex attention for Gemma 4", "Other changes"
(``tokensPerGpu``, ``data.packing``, ``validationBatchSize``), "Project names".
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ..deployment import MEMORY_SETTINGS, DeviceProfile, ValueRange
from ..errors import AkkaError
from .engine_settings import BY_KEY, LIGER_KEYS, coerce
from .environment import CatalogEntryView, PlanEnvironment
from .refusals import Refusals
from .schema import RunPlan


@dataclass
class Facts:
    """What the rules need to know about a plan beyond its fields."""

    method: str
    gpus: int
    profile: DeviceProfile
    entry: CatalogEntryView | None
    model_name: str

    @property
    def multi(self) -> bool:
        """More than one device."""
        return self.gpus > 1

    @property
    def sft_single(self) -> bool:
        """A supervised run on one device (no memory or engine settings)."""
        return self.method == "sft" and not self.multi

    @property
    def qualified_limit(self) -> int | None:
        """The base model's qualified token limit on the chosen profile."""
        return self.entry.qualified_limit(self.profile.name) if self.entry else None

    @classmethod
    def build(
        cls,
        plan: RunPlan,
        env: PlanEnvironment,
        profile: DeviceProfile,
        entry: CatalogEntryView | None,
    ) -> Facts:
        """Facts of ``plan`` on ``profile`` with the base model's ``entry``."""
        gpus = plan.execution.gpus if plan.execution and plan.execution.gpus else 1
        name = plan.modelName or plan.baseModel.rsplit("/", 1)[-1]
        return cls(plan.config.method, gpus, profile, entry, name.lower())


def _hp_path(facts: Facts) -> str:
    return "config.rlHyperparams" if facts.method == "rl" else "config.hyperparams"


def check_identity(plan: RunPlan, env: PlanEnvironment, facts: Facts, out: Refusals) -> None:
    """Project, base model and model name."""
    from ..refs import validate_name

    try:
        project = validate_name(plan.project, "project")
    except AkkaError as exc:
        out.add("project", exc.message, plan.project)
    else:
        if not env.project_exists(project):
            out.add(
                "project",
                f"project {project!r} does not exist; create it with "
                f"`training projects create {project}`.",
                plan.project,
            )
    if facts.entry is None:
        out.add(
            "baseModel",
            f"baseModel {plan.baseModel!r} is not in this deployment's catalog; "
            "`training base-models list --all` shows the models it allows.",
            plan.baseModel,
        )
    try:
        facts.model_name = validate_name(facts.model_name, "modelName")
    except AkkaError as exc:
        hint = "" if plan.modelName else " (derived from baseModel; set modelName)"
        out.add("modelName", exc.message + hint, facts.model_name)


def check_loop_groups(plan: RunPlan, facts: Facts, out: Refusals) -> None:
    """A plan states the groups of the loop that runs, not the other loop's."""
    cfg = plan.config
    if facts.method == "sft" and cfg.rlHyperparams is not None:
        out.add(
            "config.rlHyperparams",
            "config.rlHyperparams applies to a reinforcement run (method rl); a supervised "
            "run reads config.hyperparams.",
        )
    if facts.method == "rl":
        if cfg.hyperparams is not None:
            out.add(
                "config.hyperparams",
                "config.hyperparams applies to a supervised run (method sft); a reinforcement "
                "run reads config.rlHyperparams (lora, optimizer, scheduler and its loop fields).",
            )
        if cfg.loss is not None:
            out.add("config.loss", "config.loss applies to a supervised run (method sft).")
        if cfg.data is not None and cfg.data.packing is not None:
            out.add("config.data.packing", "config.data.packing applies to a supervised run.")
        if plan.execution is not None and plan.execution.saveEachEpoch is not None:
            out.add(
                "execution.saveEachEpoch",
                "execution.saveEachEpoch applies to a supervised run; a reinforcement run has "
                "no epochs.",
            )
    reward = cfg.rlHyperparams.reward if cfg.rlHyperparams else None
    if reward is not None and not (
        reward == "builtin:math"
        or (reward.startswith("bundle:") and "#" in reward)
        or reward.startswith("model:")
    ):
        out.add(
            "config.rlHyperparams.reward",
            f"config.rlHyperparams.reward {reward!r} is not a grader: use "
            "bundle:REFERENCE#MODULE[:FUNCTION], model:REFERENCE or builtin:math.",
            reward,
        )


def check_device(plan: RunPlan, env: PlanEnvironment, facts: Facts, out: Refusals) -> None:
    """Devices per node and host memory against the profile; names the devices that qualify."""
    ex = plan.execution
    dep = env.deployment
    prof = facts.profile
    host = ex.hostMemoryGiB if ex else None

    def qualifying() -> list[DeviceProfile]:
        return [
            p
            for p in dep.deviceProfiles
            if p.devicesPerNode >= facts.gpus and (host is None or p.hostMemoryGiB >= host)
        ]

    def names(ps: list[DeviceProfile]) -> str:
        if not ps:
            return "no device this deployment declares qualifies"
        return "the devices that qualify: " + ", ".join(
            f"{p.name} ({p.devicesPerNode} per node, {p.hostMemoryGiB:g} GiB host memory)"
            for p in ps
        )

    if out.has("execution.deviceProfile"):
        return
    if facts.gpus > prof.devicesPerNode:
        out.add(
            "execution.gpus",
            f"execution.gpus {facts.gpus} is more than the {prof.devicesPerNode} device(s) per "
            f"node of {prof.name}; a run holds every device it claims on one node; "
            f"{names(qualifying())}.",
            facts.gpus,
            prof.devicesPerNode,
        )
    if host is not None and host > prof.hostMemoryGiB:
        out.add(
            "execution.hostMemoryGiB",
            f"execution.hostMemoryGiB {host:g} is more than the {prof.hostMemoryGiB:g} GiB of "
            f"host memory {prof.name} has; {names(qualifying())}.",
            host,
            prof.hostMemoryGiB,
        )


def check_ceilings(
    resolved: dict[str, Any], env: PlanEnvironment, facts: Facts, out: Refusals
) -> None:
    """LoRA rank against serving, sequence length against the model's context."""
    cfg = resolved["config"]
    hp = cfg["rlHyperparams"] if facts.method == "rl" else cfg["hyperparams"]
    rank = hp["lora"]["rank"]
    max_rank = env.deployment.serving.maxLoraRank
    if rank > max_rank:
        path = f"{_hp_path(facts)}.lora.rank"
        out.add(
            path,
            f"{path} {rank} is above {max_rank}, the largest adapter rank this deployment's "
            "endpoints load (`training endpoints info`); no endpoint could serve the adapter.",
            rank,
            max_rank,
        )
    ctx = facts.entry.max_context_tokens if facts.entry else None
    if ctx is not None and facts.entry is not None and cfg["maxSeqLength"] > ctx:
        out.add(
            "config.maxSeqLength",
            f"config.maxSeqLength {cfg['maxSeqLength']} is longer than the "
            f"{facts.entry.max_context_tokens} tokens of context {facts.entry.repository} takes.",
            cfg["maxSeqLength"],
            facts.entry.max_context_tokens,
        )


def _memory_value(plan: RunPlan, path: str) -> Any:
    node: Any = plan
    for part in path.split("."):
        node = getattr(node, part, None) if node is not None else None
    return node


def check_memory(plan: RunPlan, env: PlanEnvironment, facts: Facts, out: Refusals) -> None:
    """Memory settings: not on a supervised run on one device; allowed by the deployment."""
    policy = env.deployment.memorySettings
    for path in MEMORY_SETTINGS:
        value = _memory_value(plan, path)
        if value is None:
            continue
        if path.startswith("execution.memory.") and facts.sft_single:
            out.add(
                path,
                f"{path} cannot be set on a supervised run on one device; it applies to a run "
                "on more than one device or a reinforcement run.",
                value,
            )
            continue
        if path == "execution.rollout.memoryShare" and facts.method != "rl":
            out.add(path, f"{path} applies to a reinforcement run's rollout engine.", value)
            continue
        allowed = policy.allowed.get(path)
        if allowed is None:
            out.add(path, f"{path} is not a setting this deployment allows a plan to state.", value)
        elif isinstance(allowed, ValueRange):
            if not allowed.min <= value <= allowed.max:
                out.add(
                    path,
                    f"{path} {value:g} is outside [{allowed.min:g}, {allowed.max:g}], the range "
                    "this deployment allows.",
                    value,
                    [allowed.min, allowed.max],
                )
        elif value not in allowed:
            shown = ", ".join(str(a).lower() for a in allowed)
            out.add(
                path,
                f"{path} {value!r} is not allowed by this deployment; it allows: {shown}.",
                value,
                allowed,
            )


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
                f"{path}: engine settings cannot be set on a supervised run on one device "
                "(execution.gpus 1).",
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


# What a smoke run decides itself (engine/smoke.py): a plan stating one of these would
# have it ignored, so the plan is refused naming it.
SMOKE_IGNORED = (
    ("config.hyperparams.training.epochs",
     "a smoke run trains its slice until it reproduces it, at most smokeCheck.maxSteps updates"),
    ("config.hyperparams.training.maxSteps", "a smoke run stops at smokeCheck.maxSteps"),
    ("config.data.validationDataset", "a smoke run reads its own training slice"),
    ("modelName", "a smoke run registers no model (`training snapshots register` registers "
     "its adapter)"),
    ("branchFrom", "a smoke run checks a plan from the base model or its warmStartModelId"),
    ("execution.saveEachEpoch", "a smoke run's epochs are passes over its slice"),
)  # fmt: skip


def _stated(dumped: dict[str, Any], path: str) -> Any:
    node: Any = dumped
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def check_smoke(plan: RunPlan, facts: Facts, out: Refusals) -> None:
    """``smoke`` and ``smokeCheck`` (seeds/000 "Smaller changes", F076): the smoke check
    is of supervised runs, ``smokeCheck`` needs ``smoke: true``, and a smoke run refuses
    the fields it would ignore (:data:`SMOKE_IGNORED`)."""
    if plan.smokeCheck is not None and not plan.smoke:
        out.add(
            "smokeCheck",
            "smokeCheck sets a smoke run's slice and threshold; set smoke: true or leave it out.",
        )
    if not plan.smoke:
        return
    if facts.method != "sft":
        out.add(
            "smoke",
            f"smoke: the smoke check is of supervised runs (config.method sft); a "
            f"{facts.method} run cannot be one. Leave smoke out.",
            True,
        )
    dumped = plan.model_dump(exclude_none=True)
    for path, why in SMOKE_IGNORED:
        value = _stated(dumped, path)
        if value is not None:
            out.add(path, f"{path}: {why}; leave it out of a smoke run.", value)


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
