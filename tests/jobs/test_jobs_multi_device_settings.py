"""What a plan on several devices becomes (issue 23), without a service: the worker command
under ``torch.distributed.run``, the engine settings the ranks take, and the settings
refused at the dry run and the start (``jobs/multi_device.py``), each naming its field."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from akka_optimize.engine.config import EngineConfig
from akka_optimize.jobs import multi_device
from akka_optimize.jobs.mapping import engine_settings
from akka_optimize.jobs.spec import worker_command

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from plan_fakes import resolved_plan  # noqa: E402


def _plan(gpus: int, engine: dict | None = None, **execution: object) -> dict:
    config = {
        "maxSeqLength": 768,
        "hyperparams": {"training": {"microBatchPerGpu": 2, "tokensPerGpu": 300}},
        "engineSettings": engine or {},
        "model": {"attentionImplementation": "sdpa"},
    }
    return resolved_plan(gpus, over={"config": config, "execution": execution})


def _engine(plan: dict) -> EngineConfig:
    return EngineConfig(**engine_settings(plan, ["q_proj"], "AutoModelForCausalLM", "cpu"))


def _rl(gpus: int, memory: dict | None = None, **rl: object) -> dict:
    plan = _plan(gpus, memory=memory or {})
    plan["config"]["rlHyperparams"] = {"promptsPerStep": 8, **rl}
    return plan


def test_a_reinforcement_run_on_two_devices_keeps_replicas_on_two_ranks() -> None:
    """Issue 52 item 1: ``method: rl`` with ``execution.gpus: 2`` is accepted and its ranks
    keep whole replicas (each samples its own groups)."""
    plan = _rl(2, memory={"sharding": "full"})  # the resolver's default, not stated
    plan["config"]["method"] = "rl"
    assert _refusal(plan, method="rl") is None
    typed = resolved_plan(2, method="rl", over={"execution": {"memory": {"sharding": "full"}}})
    cfg = EngineConfig(**engine_settings(typed, ["q_proj"], "AutoModelForCausalLM", "cpu"))
    assert (cfg.ranks, cfg.sharding) == (2, "none")
    stated = ["execution.memory.sharding"]  # stated: kept (and refused by the admission)
    kw = engine_settings(typed, ["q_proj"], "AutoModelForCausalLM", "cpu", stated=stated)
    assert kw["sharding"] == "full"


def test_the_worker_runs_under_torch_distributed_run_with_one_rank_per_device(tmp_path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"engine": {"ranks": 3}}))
    assert worker_command(spec) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=3",
        "-m",
        "akka_optimize.jobs.worker",
        str(spec),
    ]
    spec.write_text(json.dumps({"engine": {}}))
    assert worker_command(spec) == [sys.executable, "-m", "akka_optimize.jobs.worker", str(spec)]


def test_engine_settings_of_a_run_on_several_devices_reach_the_engine() -> None:
    engine = {
        "dtypes.compute": "fp32",
        "dtypes.reduce": "bf16",
        "dtypes.buffer": "fp32",
        "engine.prefetch_weights": False,
        "engine.pad_to_length": True,
        "engine.pad_to_length_bucket": 128,
        "engine.use_no_sync_for_gradient_accumulation": False,
        "checkpoint.compare_replicas": False,
        "checks.start": True,
        "checks.reference.max_logprob_error": 0.25,
    }
    memory = {"sharding": "none", "offload": {"activations": True}}
    cfg = _engine(_plan(2, engine, memory=memory))
    assert (cfg.ranks, cfg.sharding, cfg.precision) == (2, "none", "fp32")
    assert (cfg.reduce_dtype, cfg.buffer_dtype, cfg.prefetch_weights) == ("bf16", "fp32", False)
    assert (cfg.pad_bucket, cfg.token_budget, cfg.conversations_per_update) == (128, 300, 4)
    assert cfg.sync_once_per_update is False and cfg.compare_replicas is False
    assert cfg.offload_activations is True
    # the bounds not stated are the declared defaults the plan resolved (engine_settings.py)
    bounds = {"head": 1e-3, "isolation": 1e-3, "packing": None, "reference": 0.25}
    assert cfg.start_checks == bounds
    one = _engine(_plan(1))
    assert (one.ranks, one.pad_bucket, one.start_checks, one.token_budget) == (1, None, None, 768)


def _refusal(
    plan: dict, method: str = "sft", executor: str = "local", smoke: bool = False, kind="cpu"
):
    ctx = SimpleNamespace()
    resolved = dict(plan, smoke=smoke)
    f = {"method": method, "resolved": resolved, "device_kind": kind}
    original = multi_device._executor_kind
    multi_device._executor_kind = lambda _ctx: executor
    try:
        return multi_device.multi_device_refusal(ctx, f)
    finally:
        multi_device._executor_kind = original


REFUSED = [
    (
        "rl-sharded",
        dict(_plan(2, memory={"sharding": "full"}), stated=["execution.memory.sharding"]),
        dict(method="rl"),
        "execution.memory.sharding",
    ),
    (
        "rl-staleness",
        _rl(2, maxStaleness=1),
        dict(method="rl"),
        "config.rlHyperparams.maxStaleness",
    ),
    (
        "rl-few-prompts",
        _rl(3, promptsPerStep=2),
        dict(method="rl"),
        "config.rlHyperparams.promptsPerStep",
    ),
    ("ray", _plan(2), dict(executor="ray"), "execution.gpus"),
    ("smoke", _plan(2), dict(smoke=True), "smoke"),
    (
        "offload",
        _plan(2, memory={"offload": {"weights": False, "optimizer": True}}),
        {},
        "execution.memory.offload.optimizer",
    ),
    (
        "offload-weights-alone",
        _plan(2, memory={"offload": {"weights": True, "optimizer": False}}),
        {},
        "execution.memory.offload.weights",
    ),
    (
        "offload-without-shards",
        _plan(2, memory={"sharding": "none", "offload": {"weights": True, "optimizer": True}}),
        {},
        "execution.memory.offload.weights",
    ),
    (
        "compile",
        _plan(2, {"compile.recompile_limit": 4}),
        {},
        "config.engineSettings.compile.recompile_limit",
    ),
    (
        "liger",
        _plan(2, {"kernels.liger.geglu": True}),
        {},
        "config.engineSettings.kernels.liger.geglu",
    ),
    (
        "no-sync-with-replicas",
        _plan(
            2, {"engine.use_no_sync_for_gradient_accumulation": False}, memory={"sharding": "none"}
        ),
        {},
        "config.engineSettings.engine.use_no_sync_for_gradient_accumulation",
    ),
]


@pytest.mark.parametrize(("name", "plan", "how", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_a_run_on_several_devices_cannot_honour_is_refused_naming_it(
    name, plan, how, field
) -> None:
    err = _refusal(plan, **how)
    assert err is not None and err.field == field and err.code == "not_available"
    assert err.message.startswith(field), err.message


def test_flex_attention_is_admitted_and_one_device_is_left_alone() -> None:
    """flex_attention takes effect on several devices (engine/flex.py); which models may
    ask is the plan's rule (plan/rules/engine.py)."""
    plan = _plan(2, {"engine.pad_to_length": True, "engine.pad_to_length_bucket": 1024})
    plan["config"]["model"]["attentionImplementation"] = "flex_attention"
    assert _refusal(plan) is None
    cfg = _engine(plan)
    assert cfg.attn_implementation == "flex_attention" and cfg.pad_bucket == 1024
    assert _refusal(_plan(1, {"kernels.liger.geglu": True}), method="rl") is None
    defaults = {"compile.recompile_limit": 8, "engine.prefetch_weights": True}
    assert _refusal(_plan(2, defaults, memory={"sharding": "full"})) is None
    assert _refusal(_plan(2, memory={"offload": {"activations": True}})) is None
    both = {"sharding": "full", "offload": {"weights": True, "optimizer": True}}
    assert _refusal(_plan(2, memory=both)) is None
    assert _engine(_plan(2, memory=both)).offload_weights


def test_compile_limits_take_effect_only_where_the_flex_kernel_is_compiled() -> None:
    """The engine compiles one thing, the flex attention kernel on CUDA (engine/flex.py):
    there the limits reach the engine; on CPU or with sdpa they are refused, naming them."""
    limits = {
        "compile.recompile_limit": 2,
        "compile.accumulated_recompile_limit": 16,
        "compile.fail_on_recompile_limit": True,
    }
    flex = _plan(2, limits)
    flex["config"]["model"]["attentionImplementation"] = "flex_attention"
    assert _refusal(flex, kind="cuda") is None
    cfg = _engine(flex)
    assert (cfg.recompile_limit, cfg.accumulated_recompile_limit) == (2, 16)
    assert cfg.fail_on_recompile_limit is True
    for plan, kind in ((flex, "cpu"), (_plan(2, limits), "cuda")):
        err = _refusal(plan, kind=kind)
        assert err.field == "config.engineSettings.compile.accumulated_recompile_limit"
        assert err.message.endswith(
            "only a flex_attention run on CUDA compiles (its attention kernel); this run "
            "compiles nothing, so remove it."
        )
    defaults = _engine(_plan(2))
    assert (defaults.recompile_limit, defaults.accumulated_recompile_limit) == (8, 256)
    assert defaults.fail_on_recompile_limit is False


def test_liger_kernels_are_taken_on_cuda_and_refused_on_cpu() -> None:
    """Liger's Triton kernels: on a CUDA run they reach the engine (engine/kernels.py); a
    CPU run refuses them, naming the setting (the Gemma 4 E2B/E4B rule is the plan's)."""
    plan = _plan(2, {"kernels.liger.rms_norm": True, "kernels.liger.geglu": True})
    assert _refusal(plan, kind="cuda") is None
    cfg = _engine(plan)
    assert cfg.liger_rms_norm is True and cfg.liger_geglu is True
    err = _refusal(plan, kind="cpu")
    assert err.field == "config.engineSettings.kernels.liger.geglu"
    assert err.message.endswith(
        "Liger's kernels run on CUDA only; this run trains on CPU, so set it to false."
    )
