"""From a resolved plan to run-record fields and a worker's job spec.

The plan package resolves defaults; this module only maps the resolved plan's typed
records (:class:`akka_optimize.plan.resolved_schema.ResolvedRunPlan`; seeds/000 "Training
parameters") onto the engine's settings (:class:`akka_optimize.engine.config.EngineConfig`),
with no default of its own: a field the resolved plan lacks is refused naming it, never
replaced (issue 49 item 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..catalog import load_catalog
from ..engine.config import DEFAULT_TARGET_MODULES, EngineConfig
from ..engine_settings import BY_KEY, SETTINGS
from ..errors import InvalidRequest
from ..plan.dryrun import settings_lines
from ..plan.resolve import ResolvedPlan
from ..plan.resolved_schema import ResolvedExecution, ResolvedRunPlan, typed_plan
from ..registry import resolve
from .branches import is_origin
from .kinds import Launch
from .spec import JobSpec


def device_kind(plan: ResolvedRunPlan) -> str:
    """``cpu`` for the device profile named ``cpu`` (any case), else ``cuda``."""
    return "cpu" if plan.execution.deviceProfile.lower() == "cpu" else "cuda"


def job_fields(resolved: ResolvedPlan) -> dict[str, Any]:
    """Run-record fields of a resolved plan (:func:`akka_optimize.plan.resolve.resolve_plan`).

    ``model_name`` is the name part of the resolved ``modelName`` (``project/name``);
    ``gpus`` counts CUDA devices (0 on the CPU, except a run on several gloo ranks:
    jobs/multi_device.py).
    """
    p = typed_plan(resolved.plan)
    kind = device_kind(p)
    gpus = p.execution.gpus
    return {
        "project": p.project,
        "submission_id": p.submissionId,
        "method": p.method,
        "plan": resolved.raw,
        "resolved": {
            **resolved.plan,
            "stated": resolved.stated,
            "settingsText": [line["text"] for line in settings_lines(resolved)],
        },
        "config_hash": resolved.config_hash,
        "base_model": p.baseModel,
        "dataset": p.config.dataset,
        "validation_dataset": p.config.data.validationDataset,
        "model_name": p.modelName.split("/")[-1],
        "device_kind": kind,
        "gpus": gpus if kind == "cuda" or gpus > 1 else 0,
    }


ADAM_MOMENTS: dict[str, float] = {"adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8}
"""AdamW's betas and epsilon: the plan's ``optimizer`` has none (seeds/000 "Not in this
release"), so every run trains with torch's values."""

SHUFFLE = True
"""Every supervised run shuffles its rows each epoch, seeded by ``training.seed`` (the plan
has no switch for it)."""

RL_SESSION: dict[str, Any] = {
    "epochs": 1,
    "micro_batch": 1,
    "gradient_accumulation": 1,
    "validation_frequency_steps": 0,
    "validate_each_epoch": False,
}
"""The supervised loop's fields on a reinforcement run's engine session: the loop
(:mod:`akka_optimize.engine.rl.loop`) makes one update per prompt batch from its own fields
(``rlHyperparams.steps``, ``promptsPerStep``, groups dealt whole to ``execution.gpus``
ranks) and validates nothing, so these are fixed, not read from the plan."""

ONE_RANK: dict[str, Any] = {
    "reduce_dtype": BY_KEY["dtypes.reduce"].default,
    "buffer_dtype": None,
    "prefetch_weights": BY_KEY["engine.prefetch_weights"].default,
    "pad_bucket": None,
    "validation_batch": None,
    "recompile_limit": BY_KEY["compile.recompile_limit"].default,
    "accumulated_recompile_limit": BY_KEY["compile.accumulated_recompile_limit"].default,
    "fail_on_recompile_limit": BY_KEY["compile.fail_on_recompile_limit"].default,
    "liger_rms_norm": BY_KEY["kernels.liger.rms_norm"].default,
    "liger_geglu": BY_KEY["kernels.liger.geglu"].default,
    "start_checks": None,
}
"""The settings only a run on several ranks takes, on one rank (a supervised run on one
device states no engine setting, and a reinforcement run none of these): buffers keep the
dtype they load in, passes are not padded, validation takes one update's conversations
per call, the checks before the first update do not run (they compare ranks' packing and
sharding), and the rest are their declared defaults (:mod:`akka_optimize.plan.
engine_settings`; nothing compiles and no Liger kernel loads on one rank)."""


NO_MEMORY: dict[str, Any] = {
    "sharding": "full",
    "offload_weights": False,
    "offload_activations": False,
}
"""The memory settings where ``execution.memory`` does not apply (a supervised run on one
device: nothing to shard, nothing offloaded; the engine shards only several ranks)."""


def _setting(es: dict[str, Any], key: str) -> Any:
    """Engine setting ``key`` of the run: resolved into ``config.engineSettings`` for the
    loops it applies to (:func:`akka_optimize.plan.resolve.resolve_engine_settings`), its
    declared default where the run's loop has none (a supervised run on one device)."""
    return es[key] if key in es else BY_KEY[key].default


def engine_settings(
    plan: ResolvedRunPlan | dict[str, Any],
    target_modules: list[str] | tuple[str, ...] | str,
    auto_class: str,
    device: str,
    stated: Sequence[str] = (),
) -> dict[str, Any]:
    """Every :class:`akka_optimize.engine.config.EngineConfig` field, as keyword arguments,
    from a resolved plan and the base model's catalog entry (``loraTargetModules``,
    ``autoClass``); ``device`` is ``cpu``, ``cuda`` or ``auto``; ``stated`` the plan's
    stated field paths (a run record's ``stated``).

    A reinforcement plan's ``lora``, ``optimizer``, ``scheduler`` and ``seed`` come from
    ``config.rlHyperparams``, its updates from ``rlHyperparams.steps`` (its loop's own
    fields: :mod:`akka_optimize.engine.rl.loop`; the rest is :data:`RL_SESSION`). Nothing here
    has a default of its own: every value is the resolved plan's, a declared engine
    setting's (:func:`_setting`), or one of the named constants above.

    Raises:
        InvalidRequest: (``resolved_plan_invalid``) a dict that is not a resolved plan
            (:func:`akka_optimize.plan.resolved_schema.typed_plan`).
    """
    p = plan if isinstance(plan, ResolvedRunPlan) else typed_plan(plan)
    cfg, ex = p.config, p.execution
    rl = cfg.rlHyperparams if cfg.method == "rl" else None
    dpo = cfg.dpoHyperparams if cfg.method == "dpo" else None
    hp = rl or dpo or cfg.hyperparams
    assert hp is not None  # ResolvedConfig holds the loop's group
    es = cfg.engineSettings
    out: dict[str, Any] = {
        "lora_rank": hp.lora.rank,
        "lora_alpha": float(hp.lora.alpha),
        "lora_dropout": float(hp.lora.dropout),
        # a regular expression stays one string (engine/targets.py)
        "target_modules": target_modules
        if isinstance(target_modules, str)
        else list(target_modules),
        "auto_class": auto_class,
        "learning_rate": float(hp.optimizer.learningRate),
        "weight_decay": float(hp.optimizer.weightDecay),
        "max_grad_norm": float(hp.optimizer.maxGradNorm),
        **ADAM_MOMENTS,
        "scheduler": hp.scheduler.kind,
        "warmup_ratio": float(hp.scheduler.warmupRatio),
        "min_learning_rate_ratio": float(hp.scheduler.minLearningRateRatio),
        "dynamic_batches": cfg.data.use_dynamic_bsz,
        "token_budget": cfg.maxSeqLength,
        "precision": cfg.model.precision,
        "weight_precision": cfg.model.weightPrecision,
        "gradient_checkpointing": cfg.model.gradientCheckpointing,
        "attn_implementation": cfg.model.attentionImplementation,
        "head_chunk_tokens": int(_setting(es, "head.chunk_tokens")),
        "shuffle": SHUFFLE,
        "save_every_steps": ex.saveEverySteps,
        "keep_recoverable": ex.keepRecoverable,
        "save_each_epoch": ex.saveEachEpoch,
        "device": device,
        # several devices (engine/distributed.py): ranks, sharding, gradient sync, replicas
        "ranks": ex.gpus,
        **_memory(ex),
        "sync_once_per_update": bool(_setting(es, "engine.use_no_sync_for_gradient_accumulation")),
        "compare_replicas": bool(_setting(es, "checkpoint.compare_replicas")),
        "extra": {},
        **ONE_RANK,
    }
    out.update(_loop(p))
    if cfg.method == "sft" and ex.gpus > 1:  # the settings only such a run takes
        out.update(_multi_device_settings(p, es))
    if cfg.method == "rl" and ex.gpus > 1 and "execution.memory.sharding" not in stated:
        # each rank samples its own groups, so a reinforcement run keeps whole replicas
        # unless the plan stated a sharding (which jobs/multi_device.py refuses; issue 52)
        out["sharding"] = "none"
    return out


def _memory(ex: ResolvedExecution) -> dict[str, Any]:
    """EngineConfig's memory settings from ``execution.memory``, or :data:`NO_MEMORY`."""
    if ex.memory is None:
        return NO_MEMORY
    return {
        "offload_activations": ex.memory.offload.activations,
        # weights and optimizer go together (jobs/multi_device.py refuses them apart)
        "offload_weights": ex.memory.offload.weights,
        "sharding": ex.memory.sharding,
    }


def _loop(p: ResolvedRunPlan) -> dict[str, Any]:
    """EngineConfig's loop settings: ``hyperparams.training`` of a supervised run; a
    reinforcement run's seed and ``steps``, with :data:`RL_SESSION`; a preference run's
    own loop fields of ``dpoHyperparams``."""
    rl = p.config.rlHyperparams if p.method == "rl" else None
    if rl is not None:
        return {**RL_SESSION, "seed": rl.seed, "max_steps": rl.steps}
    dpo = p.config.dpoHyperparams if p.method == "dpo" else None
    if dpo is not None:  # a preference run's loop counts pairs (issue 50)
        return {
            "epochs": dpo.epochs,
            "micro_batch": dpo.microBatchPerGpu,
            "gradient_accumulation": dpo.gradientAccumulation,
            "validation_frequency_steps": dpo.validationFrequencySteps,
            "validate_each_epoch": False,
            "seed": dpo.seed,
            "max_steps": dpo.maxSteps,
        }
    t = p.config.hyperparams.training  # type: ignore[union-attr]
    return {
        "epochs": t.epochs,
        "micro_batch": t.microBatchPerGpu,
        "gradient_accumulation": t.gradientAccumulation,
        "validation_frequency_steps": t.validationFrequencySteps,
        "validate_each_epoch": t.validateEachEpoch,
        "seed": t.seed,
        "max_steps": t.maxSteps,
    }


def _multi_device_settings(p: ResolvedRunPlan, es: dict[str, Any]) -> dict[str, Any]:
    """EngineConfig keyword arguments of the engine settings, ``tokensPerGpu`` and
    ``validationBatchSize`` of a supervised run on several devices (jobs/multi_device.py
    refuses the ones this engine cannot honour). Every key is resolved for this loop, so
    each is read with ``es[key]``."""
    t = p.config.hyperparams.training  # type: ignore[union-attr]
    missing = [x.key for x in SETTINGS if "sft" in x.loops and x.key not in es]
    if missing:
        raise InvalidRequest(
            f"The run's resolved plan has no config.engineSettings.{missing[0]}, which a "
            "supervised run on several devices resolves; resubmit the plan so it resolves "
            "again.",
            field=f"config.engineSettings.{missing[0]}",
            code="resolved_plan_invalid",
        )
    # check name → its bound's setting (checks.head.max_logprob_error → head)
    bounds = {s.key.split(".")[1]: s.key for s in SETTINGS if s.check_bound is not None}
    out: dict[str, Any] = {
        "reduce_dtype": es["dtypes.reduce"],
        "buffer_dtype": es["dtypes.buffer"],
        "prefetch_weights": bool(es["engine.prefetch_weights"]),
        "pad_bucket": int(es["engine.pad_to_length_bucket"])
        if es["engine.pad_to_length"]
        else None,
        "validation_batch": t.validationBatchSize,
        "recompile_limit": int(es["compile.recompile_limit"]),
        "accumulated_recompile_limit": int(es["compile.accumulated_recompile_limit"]),
        "fail_on_recompile_limit": bool(es["compile.fail_on_recompile_limit"]),
        "liger_rms_norm": bool(es["kernels.liger.rms_norm"]),
        "liger_geglu": bool(es["kernels.liger.geglu"]),
        "start_checks": {name: es[key] for name, key in bounds.items()}
        if es["checks.start"]
        else None,
        "precision": es["dtypes.compute"],
    }
    if t.tokensPerGpu is not None:  # resolved for every run on several devices
        out["token_budget"] = t.tokensPerGpu
    return out


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of one attempt of a supervised run (the ``sft`` kind's ``build_spec``).

    Raises:
        InvalidRequest: (``resolved_plan_invalid``) the run's resolved plan lacks a field or
            holds an unknown one, named (:func:`akka_optimize.plan.resolved_schema.typed_plan`).
    """
    s, ctx, run, resume_key = launch.session, launch.ctx, launch.run, launch.resume_key
    plan = typed_plan(run.resolved)
    dep = ctx.deployment()
    entry = load_catalog(dep).get(run.base_model)
    # a base model the catalog no longer lists trains on the engine's declared targets
    targets = entry.lora_target_modules if entry else DEFAULT_TARGET_MODULES
    auto_class = entry.auto_class if entry else EngineConfig.auto_class
    ds = resolve(s, "dataset", run.dataset, run.project).to_dict()
    val = (
        resolve(s, "dataset", run.validation_dataset, run.project).to_dict()
        if run.validation_dataset
        else None
    )
    device = "cuda" if run.device_kind == "cuda" else "cpu"
    return launch.spec(
        dataset=ds,
        validation_dataset=val,
        engine=engine_settings(
            plan, targets, auto_class, device, stated=run.resolved.get("stated") or ()
        ),
        **worker_settings(plan),
        resume_step=run.resume_step if resume_key else None,
        resume_state_key=resume_key,
        branch_origin=bool(resume_key) and is_origin(run, run.resume_step),
        warm_start=resolve(s, "model", plan.warmStartModelId).to_dict()
        if plan.warmStartModelId
        else None,
        device=device,
    )


def worker_settings(plan: ResolvedRunPlan) -> dict[str, Any]:
    """The job-spec fields of a resolved plan beside the engine's settings: ``loss``
    (``config.loss``; empty on a reinforcement run), ``max_seq_length`` (tokens),
    ``on_too_long`` (``refuse`` or ``drop``) and ``extra.smoke`` (a smoke run's
    ``smokeCheck``)."""
    cfg = plan.config
    smoke = plan.smokeCheck.model_dump() if plan.smoke and plan.smokeCheck else None
    return {
        "loss": cfg.loss.model_dump() if cfg.loss else {},
        "max_seq_length": cfg.maxSeqLength,
        "on_too_long": cfg.data.onTooLong,
        "extra": {"smoke": smoke} if smoke else {},
    }
