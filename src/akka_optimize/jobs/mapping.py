"""From a resolved plan to run-record fields and a worker's job spec.

The plan package resolves defaults; this module only maps the resolved plan's
names (seeds/000 "Training parameters") onto the engine's settings
(:class:`akka_optimize.engine.config.EngineConfig`).
"""

from __future__ import annotations

from typing import Any

from .fields import setting as _get
from .kinds import Launch
from .spec import JobSpec


def _as_dict(resolved: Any) -> dict[str, Any]:
    for attr in ("to_dict", "model_dump"):
        fn = getattr(resolved, attr, None)
        if callable(fn):
            return fn()
    if isinstance(resolved, dict):
        return resolved
    raise TypeError(f"cannot read a resolved plan of type {type(resolved).__name__}")


def job_fields(resolved: Any) -> dict[str, Any]:
    """Run-record fields of a resolved plan (:class:`akka_optimize.plan.resolve.ResolvedPlan`)."""
    r = _as_dict(resolved)
    plan = r["plan"]
    raw = getattr(resolved, "raw", None) or r.get("raw") or plan
    cfg = plan["config"]
    base = plan["baseModel"]
    model_name = str(plan.get("modelName") or base.split("/")[-1].lower()).split("/")[-1]
    profile = r.get("deviceProfile") or _get(plan, "execution.deviceProfile") or "cpu"
    kind = "cpu" if str(profile).lower() == "cpu" else "cuda"
    gpus = int(_get(plan, "execution.gpus", 1) or 1)
    return {
        "project": plan["project"],
        "submission_id": plan.get("submissionId"),
        "method": cfg.get("method", "sft"),
        "plan": raw,
        "resolved": {
            **plan,
            "stated": r.get("stated", []),
            "settingsText": _settings_text(resolved),
        },
        "config_hash": r["configHash"],
        "base_model": base,
        "dataset": cfg["dataset"],
        "validation_dataset": _get(cfg, "data.validationDataset"),
        "model_name": model_name,
        "device_kind": kind,
        # CPU counts as no GPU, except a run on several gloo ranks (jobs/multi_device.py)
        "gpus": gpus if kind == "cuda" or gpus > 1 else 0,
    }


def _settings_text(resolved: Any) -> list[str] | None:
    """The settings as the dry run shows them (one line per group, stated values marked
    ``*``), frozen with the run so ``runs get --settings`` shows what it started with."""
    if not hasattr(resolved, "stated") or not hasattr(resolved, "plan"):
        return None
    from ..plan.dryrun import settings_lines

    return [line["text"] for line in settings_lines(resolved)]


def engine_settings(
    plan: dict[str, Any],
    target_modules: list[str] | tuple[str, ...] | str | None,
    auto_class: str | None = None,
) -> dict[str, Any]:
    """EngineConfig keyword arguments for a resolved plan and the base model's catalog
    entry (``loraTargetModules``, ``autoClass``). A reinforcement plan's ``lora``,
    ``optimizer``, ``scheduler`` and ``seed`` come from ``config.rlHyperparams``, its
    updates from ``rlHyperparams.steps`` (its loop's own fields: :mod:`akka_optimize.engine.rl`)."""
    rl = _get(plan, "config.method", "sft") == "rl"
    hp = _get(plan, "config.rlHyperparams" if rl else "config.hyperparams", {})
    if rl:
        hp = {**hp, "training": {"seed": hp.get("seed", 0), "maxSteps": hp.get("steps")}}
    if _get(plan, "config.method") == "dpo":  # a preference run's loop fields (issue 50)
        hp = _get(plan, "config.dpoHyperparams", {})
        hp = {**hp, "training": {k: v for k, v in hp.items() if not isinstance(v, dict)}}
    es = _get(plan, "config.engineSettings", {}) or {}
    precision = _get(plan, "config.model.precision", "auto")
    out: dict[str, Any] = {
        "lora_rank": _get(hp, "lora.rank", 16),
        "lora_alpha": float(_get(hp, "lora.alpha", 2 * _get(hp, "lora.rank", 16))),
        "lora_dropout": float(_get(hp, "lora.dropout", 0.0)),
        "learning_rate": float(_get(hp, "optimizer.learningRate", 2e-4)),
        "weight_decay": float(_get(hp, "optimizer.weightDecay", 0.0)),
        "max_grad_norm": float(_get(hp, "optimizer.maxGradNorm", 1.0)),
        "scheduler": _get(hp, "scheduler.kind", "linear"),
        "warmup_ratio": float(_get(hp, "scheduler.warmupRatio", 0.0)),
        "min_learning_rate_ratio": float(_get(hp, "scheduler.minLearningRateRatio", 0.0)),
        "epochs": int(_get(hp, "training.epochs", 1)),
        "micro_batch": int(_get(hp, "training.microBatchPerGpu", 1)),
        "dynamic_batches": bool(_get(plan, "config.data.use_dynamic_bsz", True)),
        "token_budget": int(_get(plan, "config.maxSeqLength", 2048)),
        "gradient_accumulation": int(_get(hp, "training.gradientAccumulation", 1)),
        "validation_frequency_steps": int(_get(hp, "training.validationFrequencySteps", 0)),
        "validate_each_epoch": bool(_get(hp, "training.validateEachEpoch", False)),
        "seed": int(_get(hp, "training.seed", 0)),
        "max_steps": _get(hp, "training.maxSteps"),
        "precision": precision if precision in ("auto", "fp32", "bf16") else "auto",
        "weight_precision": _weight_precision(plan),
        "gradient_checkpointing": bool(_get(plan, "config.model.gradientCheckpointing", False)),
        "attn_implementation": _get(plan, "config.model.attentionImplementation", "sdpa"),
        "head_chunk_tokens": int(es.get("head.chunk_tokens", 512)),
        "save_every_steps": int(_get(plan, "execution.saveEverySteps", 0) or 0),
        "keep_recoverable": int(_get(plan, "execution.keepRecoverable", 1)),
        "save_each_epoch": bool(_get(plan, "execution.saveEachEpoch", False)),
        # several devices (engine/distributed.py): ranks, sharding, gradient sync, replicas
        "ranks": 1 if rl else int(_get(plan, "execution.gpus", 1) or 1),
        "offload_activations": bool(_get(plan, "execution.memory.offload.activations", False)),
        # weights and optimizer go together (jobs/multi_device.py refuses them apart)
        "offload_weights": bool(_get(plan, "execution.memory.offload.weights", False)),
        "sharding": _get(plan, "execution.memory.sharding", None) or "full",
        "sync_once_per_update": bool(es.get("engine.use_no_sync_for_gradient_accumulation", True)),
        "compare_replicas": bool(es.get("checkpoint.compare_replicas", True)),
    }
    if out["ranks"] > 1:  # the settings only a run on several devices takes
        out.update(_multi_device_settings(hp, es))
    if target_modules:  # a regular expression stays one string (engine/targets.py)
        out["target_modules"] = (
            target_modules if isinstance(target_modules, str) else list(target_modules)
        )
    if auto_class:
        out["auto_class"] = auto_class
    return out


def _multi_device_settings(hp: dict[str, Any], es: dict[str, Any]) -> dict[str, Any]:
    """EngineConfig keyword arguments of the engine settings, ``tokensPerGpu`` and
    ``validationBatchSize`` of a supervised run on several devices (jobs/multi_device.py
    refuses the ones this engine cannot honour)."""
    from ..engine_settings import BY_KEY, SETTINGS

    # check name → its bound's setting (checks.head.max_logprob_error → head)
    bounds = {s.key.split(".")[1]: s.key for s in SETTINGS if s.check_bound is not None}

    def setting(key: str) -> Any:  # the resolved value, else the declared default
        return es.get(key, BY_KEY[key].default)

    out: dict[str, Any] = {
        "reduce_dtype": es.get("dtypes.reduce") or "fp32",
        "buffer_dtype": es.get("dtypes.buffer"),
        "prefetch_weights": bool(es.get("engine.prefetch_weights", True)),
        "pad_bucket": int(es.get("engine.pad_to_length_bucket") or 1024)
        if es.get("engine.pad_to_length", False)
        else None,
        "validation_batch": _get(hp, "training.validationBatchSize"),
        "recompile_limit": int(setting("compile.recompile_limit")),
        "accumulated_recompile_limit": int(setting("compile.accumulated_recompile_limit")),
        "fail_on_recompile_limit": bool(setting("compile.fail_on_recompile_limit")),
        "liger_rms_norm": bool(setting("kernels.liger.rms_norm")),
        "liger_geglu": bool(setting("kernels.liger.geglu")),
        "start_checks": {name: es.get(setting) for name, setting in bounds.items()}
        if es.get("checks.start", True)
        else None,
    }
    if es.get("dtypes.compute"):
        out["precision"] = es["dtypes.compute"]
    if _get(hp, "training.tokensPerGpu"):
        out["token_budget"] = int(_get(hp, "training.tokensPerGpu"))
    return out


def _weight_precision(plan: dict[str, Any]) -> str:
    wp = _get(plan, "config.model.weightPrecision", "auto")
    return wp if wp in ("auto", "fp32", "bf16") else "auto"


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of one attempt of a supervised run (the ``sft`` kind's ``build_spec``)."""
    from ..catalog import load_catalog
    from ..deployment import load_deployment
    from ..registry import resolve
    from .branches import is_origin

    s, ctx, run, resume_key = launch.session, launch.ctx, launch.run, launch.resume_key
    plan = run.resolved
    dep = load_deployment(ctx.settings.resolved_deployment_file())
    entry = load_catalog(dep).get(run.base_model)
    targets = getattr(entry, "lora_target_modules", None) if entry else None
    ds = resolve(s, "dataset", run.dataset, run.project).to_dict()
    val = (
        resolve(s, "dataset", run.validation_dataset, run.project).to_dict()
        if run.validation_dataset
        else None
    )
    engine = engine_settings(plan, targets, getattr(entry, "auto_class", None))
    engine["device"] = "cuda" if run.device_kind == "cuda" else "cpu"
    return launch.spec(
        dataset=ds,
        validation_dataset=val,
        engine=engine,
        loss=_get(plan, "config.loss", {}) or {},
        max_seq_length=int(_get(plan, "config.maxSeqLength", 2048)),
        on_too_long=_get(plan, "config.data.onTooLong", "drop"),
        resume_step=run.resume_step if resume_key else None,
        resume_state_key=resume_key,
        branch_origin=bool(resume_key) and is_origin(run, run.resume_step),
        warm_start=resolve(s, "model", plan["warmStartModelId"]).to_dict()
        if plan.get("warmStartModelId")
        else None,
        device=engine["device"],
        extra={"smoke": plan["smokeCheck"]} if plan.get("smoke") else {},
    )
