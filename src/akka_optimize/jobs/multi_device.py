"""What a run on several devices may state (issue 23), checked at the dry run and the start.

A supervised run with ``execution.gpus`` N > 1 trains on N ranks under
``torch.distributed.run`` (:func:`akka_optimize.jobs.spec.worker_command`, the engine in
:mod:`akka_optimize.engine.distributed`). A setting such a run resolves must take effect or
be refused, naming it: :func:`multi_device_refusal` is the refusal
:mod:`akka_optimize.jobs.admission` reports for the dry run and raises at the start.

On CPU the ranks are gloo processes: a deployment whose ``cpu`` device profile declares
``devicesPerNode: N`` lets a plan state ``execution.gpus`` up to N (how CI tests it).
"""

from __future__ import annotations

from typing import Any

from ..engine_settings import BY_KEY
from ..errors import AkkaError, InvalidRequest
from .context import JobContext

COMPILE_LIMITS = ("compile.recompile_limit", "compile.accumulated_recompile_limit")
"""Engine settings that limit ``torch.compile``. The engine compiles one thing, the flex
attention kernel on CUDA (engine/flex.py), so any other run refuses them unless they keep
their declared default."""


def run_ranks(resolved: dict[str, Any]) -> int:
    """The ranks a run trains on: ``execution.gpus`` of the resolved plan (1 when unset)."""
    return int((resolved.get("execution") or {}).get("gpus") or 1)


def _refuse(field: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {why}", field=field, code="not_available")


def multi_device_refusal(ctx: JobContext, f: dict[str, Any]) -> AkkaError | None:
    """The first setting a run on several devices cannot honour, or None (also None for a
    run on one device). Checked: the method (supervised, or reinforcement within
    :func:`_rl_refusal`), the executor (local only),
    the smoke check, weight and optimizer offload (:func:`_offload_refusal`),
    and each engine setting that would not take effect (:func:`_engine_setting_refusal`)."""
    r = f["resolved"]
    ranks = run_ranks(r)
    if ranks <= 1:
        return None
    if f["method"] == "rl":
        refused = _rl_refusal(r, ranks)
        if refused is not None:
            return refused
    elif f["method"] not in ("sft", "dpo"):
        return _refuse(
            "execution.gpus",
            f"{ranks} devices: only a supervised, reinforcement or preference (dpo) run "
            "trains on several "
            "devices in this release; set execution.gpus to 1.",
        )
    if _executor_kind(ctx) != "local":
        return _refuse(
            "execution.gpus",
            f"{ranks} devices: the {_executor_kind(ctx)} executor places one device per "
            "worker in this release; set execution.gpus to 1 or use the local executor.",
        )
    if r.get("smoke"):
        return _refuse(
            "smoke",
            "a smoke check trains on one device; set execution.gpus to 1 for a smoke run.",
        )
    memory = (r.get("execution") or {}).get("memory") or {}
    refused = _offload_refusal(memory)
    if refused is not None:
        return refused
    settings = ((r.get("config") or {}).get("engineSettings")) or {}
    attention = ((r.get("config") or {}).get("model") or {}).get("attentionImplementation")
    cuda, flex = f.get("device_kind") == "cuda", attention == "flex_attention"
    for key in sorted(settings):
        why = _engine_setting_refusal(key, settings[key], memory.get("sharding"), cuda, flex)
        if why:
            return _refuse(f"config.engineSettings.{key}", why)
    return None


def _rl_refusal(r: dict[str, Any], ranks: int) -> AkkaError | None:
    """What a reinforcement run on ``ranks`` devices cannot do (engine/rl/ranks.py): a
    sharded body (each rank samples its own groups with a whole replica), samples drawn
    ahead (``maxStaleness`` > 0), or fewer prompts per update than ranks."""
    rl = (r.get("config") or {}).get("rlHyperparams") or {}
    memory = (r.get("execution") or {}).get("memory") or {}
    stated = "execution.memory.sharding" in (r.get("stated") or [])
    if stated and memory.get("sharding") != "none":
        return _refuse(
            "execution.memory.sharding",
            f"a reinforcement run on {ranks} devices keeps a whole replica of the adapter on "
            "each rank (each samples its own groups); set it to none or leave it out.",
        )
    if int(rl.get("maxStaleness") or 0) > 0:
        return _refuse(
            "config.rlHyperparams.maxStaleness",
            f"samples drawn ahead run on one device in this release; set it to 0 with "
            f"execution.gpus {ranks}.",
        )
    per_step = int(rl.get("promptsPerStep") or 1)
    if per_step < ranks:
        return _refuse(
            "config.rlHyperparams.promptsPerStep",
            f"{per_step} prompts per update on {ranks} devices leaves a rank without a group; "
            f"give at least {ranks}.",
        )
    return None


def _offload_refusal(memory: dict[str, Any]) -> AkkaError | None:
    """``offload.weights`` and ``offload.optimizer`` take effect together, as FSDP2's
    ``CPUOffloadPolicy`` (the optimizer steps on the offloaded shards, so its state lives
    with them): refused apart, and with sharding ``none`` (no shards to offload).
    ``offload.activations`` is ``torch.autograd.graph.save_on_cpu`` and goes with any."""
    offload = memory.get("offload") or {}
    weights, optimizer = bool(offload.get("weights")), bool(offload.get("optimizer"))
    if weights != optimizer:
        on, off = ("weights", "optimizer") if weights else ("optimizer", "weights")
        return _refuse(
            f"execution.memory.offload.{on}",
            f"FSDP2 offloads the weights and the optimizer state together; set "
            f"execution.memory.offload.{off} to true as well, or this one to false.",
        )
    if weights and memory.get("sharding") == "none":
        return _refuse(
            "execution.memory.offload.weights",
            "with execution.memory.sharding none there are no shards to offload; use "
            "sharding full or set offload.weights and offload.optimizer to false.",
        )
    return None


def _engine_setting_refusal(
    key: str, value: Any, sharding: str | None, cuda: bool, flex: bool
) -> str | None:
    """Why the resolved engine setting ``key`` would not take effect, or None. ``cuda``:
    the run trains on CUDA; ``flex``: with flex_attention, whose kernel is compiled there.
    Which models may ask for Liger's kernels is the plan's rule (plan/rules/engine.py)."""
    compiles = cuda and flex
    replicas = sharding == "none"
    stated = (key in COMPILE_LIMITS and value != BY_KEY[key].default) or (
        key == "compile.fail_on_recompile_limit" and value
    )
    if stated and not compiles:
        return (
            "only a flex_attention run on CUDA compiles (its attention kernel); this run "
            "compiles nothing, so remove it."
        )
    if key.startswith("kernels.liger.") and value and not cuda:
        return "Liger's kernels run on CUDA only; this run trains on CPU, so set it to false."
    if key == "engine.use_no_sync_for_gradient_accumulation" and not value and replicas:
        return (
            "with execution.memory.sharding none the replicas' gradients are combined once "
            "per update; set it to true or use sharding full."
        )
    if key == "engine.prefetch_weights" and not value and replicas:
        return "with execution.memory.sharding none no weights are gathered; remove it."
    return None


def _executor_kind(ctx: JobContext) -> str:

    return ctx.deployment().executor.kind
