"""Plan rules on the resources a run claims: devices and host memory against the device
profile, LoRA rank and sequence length against their ceilings, and memory settings.

Sources: seeds/000 "H100 support" (device profile, host memory, naming the devices that
qualify), "Endpoints reachable from your machine" (LoRA rank above what endpoints load);
seeds/001 "Choose a run's memory settings".
"""

from __future__ import annotations

from typing import Any

from ...deployment import MEMORY_SETTINGS, DeviceProfile, ValueRange
from ..environment import PlanEnvironment
from ..refusals import Refusals
from ..schema.run import RunPlan
from .facts import Facts, hp_path


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
    hp = cfg[hp_path(facts).removeprefix("config.")]
    rank = hp["lora"]["rank"]
    max_rank = env.deployment.serving.maxLoraRank
    if rank > max_rank:
        path = f"{hp_path(facts)}.lora.rank"
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
                f"{path} cannot be set on a preference run; each rank keeps whole weights."
                if facts.method == "dpo"
                else f"{path} cannot be set on a supervised run on one device; it applies to "
                "a run on more than one device or a reinforcement run.",
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
