"""The resolved plan reaches the engine typed, with no default of the mapping's own
(issue 49 item 3): every :class:`EngineConfig` field is set from the resolved plan (or a
named constant the plan has no field for), and every plan default reaches the worker."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from plan_fakes import resolved_plan

from akka_optimize import engine_settings as ES
from akka_optimize.deployment import load_deployment
from akka_optimize.engine.config import EngineConfig
from akka_optimize.errors import InvalidRequest
from akka_optimize.jobs import mapping
from akka_optimize.plan import defaults as D
from akka_optimize.plan import resolve as R
from akka_optimize.plan.resolved_schema import typed_plan
from akka_optimize.reinforcement.kind import loop_settings

TARGETS = ("q_proj", "v_proj")
AUTO = "AutoModelForCausalLM"
FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}

NOT_IN_PLAN = {
    "adam_beta1": "the plan's optimizer has no betas (seeds/000 'Not in this release')",
    "adam_beta2": "the same",
    "adam_epsilon": "the same",
    "shuffle": "every run shuffles each epoch, seeded by training.seed",
    "target_modules": "the catalog entry's loraTargetModules",
    "auto_class": "the catalog entry's autoClass",
    "device": "the run record's device kind",
    "extra": "free-form, for the caller; the engine ignores it",
}
"""EngineConfig fields the resolved plan has no field for, and where each comes from."""

ONE_RANK_ONLY = set(mapping.ONE_RANK) | set(mapping.RL_SESSION) | set(mapping.NO_MEMORY) | {"ranks"}
"""Fields that only a supervised run on several devices (or only a supervised loop)
reads from the plan; the other plans set them from the named constants (``ranks`` is
``execution.gpus``, which the walk moves only where the engine settings are resolved)."""

DECLARED = {"head_chunk_tokens", "sync_once_per_update", "compare_replicas"}
"""Engine settings a loop without them takes at their declared default
(engine_settings.py): a supervised run on one device states none."""

PLANS = {
    "sft-one-device": lambda: resolved_plan(1),
    "sft-two-devices": lambda: resolved_plan(2),
    "rl": lambda: resolved_plan(1, "rl"),
}

OTHER = {
    "cosine": "linear",
    "linear": "cosine",
    "constant": "linear",
    "fp32": "bf16",
    "bf16": "fp32",
    "sdpa": "eager",
    "full": "none",
    "none": "full",
    "refuse": "drop",
    "drop": "refuse",
    "all": "last",
    "importance_sampling": "ppo",
    "builtin:math": "model:triage/judge:v1@sha256:00",
}
"""Another value of each string a resolved plan holds (a value missing here has one
choice only: ``adamw``, ``transformers``)."""


BY_LEAF: dict[str, dict[str, str]] = {
    "rolloutCorrection": {"none": "truncated_is"},
    "advantageNormalization": {"population_std": "sample_std"},
    "lossAggregation": {"token_mean": "sequence_mean"},
}
"""Another value of a leaf whose values :data:`OTHER` would map wrongly (``none``)."""


def _other(path: str, value: Any) -> Any:
    """Another valid value for the resolved leaf at ``path``, or None where there is none."""
    leaf = path.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.25
    if isinstance(value, str):  # a leaf whose values overlap another's names its own
        return BY_LEAF.get(leaf, OTHER).get(value)
    assert value is None, path
    if leaf in ("loss", "memory", "rollout"):
        return None  # a group the loop does not have
    return {"validationDataset": "triage/val:v2@sha256:00", "hostMemoryGiB": 8.0}.get(leaf, 3)


def _leaves(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict) and node and not path.endswith("engineSettings"):
        return [x for k, v in node.items() for x in _leaves(v, f"{path}.{k}" if path else k)]
    if isinstance(node, dict) and path.endswith("engineSettings"):
        return [(f"{path}.{k}", v) for k, v in node.items()]
    return [(path, node)]


def _set(plan: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(plan)
    head, sep, key = path.partition("engineSettings.")
    parts = [*head.rstrip(".").split("."), "engineSettings", key] if sep else path.split(".")
    node = out
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value
    return out


def _engine(plan: dict[str, Any], check: bool = True) -> dict[str, Any]:
    kw = mapping.engine_settings(plan, TARGETS, AUTO, "cpu")
    if check:
        EngineConfig(**kw)  # every value is one the engine takes
    return kw


def _reaching(plan: dict[str, Any]) -> dict[str, Any]:
    """What a worker receives of a plan: the engine's settings, the other spec fields and,
    on a reinforcement run, its loop's and sampler's settings."""
    typed = typed_plan(plan)
    out = {**_engine(plan), **mapping.worker_settings(typed)}
    if typed.method == "rl":
        out.update(loop_settings(typed, load_deployment()))
    return out


@pytest.mark.parametrize("name", PLANS)
def test_every_engine_field_is_set_from_the_resolved_plan(name: str) -> None:
    """Each EngineConfig field is given explicitly (none left to its dataclass default),
    and each one changes when some leaf of the resolved plan changes, unless the plan has
    no field for it (NOT_IN_PLAN) or this loop fixes it (ONE_RANK, RL_SESSION)."""
    plan = PLANS[name]()
    base = _engine(plan)
    assert set(base) == FIELDS, f"not set from the plan: {sorted(FIELDS - set(base))}"
    moved: set[str] = set()
    for path, value in _leaves({k: plan[k] for k in ("config", "execution")}):
        other = _other(path, value)
        if other is None or (path == "execution.gpus" and not plan["config"]["engineSettings"]):
            continue  # one value only; a second device needs the engine settings resolved
        kw = _engine(_set(plan, path, other), check=False)
        moved |= {k for k in FIELDS if kw[k] != base[k]}
    unexplained = FIELDS - moved - set(NOT_IN_PLAN)
    if name != "sft-two-devices":
        unexplained -= ONE_RANK_ONLY | DECLARED
    assert not unexplained, f"{name}: no resolved field changes {sorted(unexplained)}"


NOT_THE_WORKERS = {
    "OPTIMIZER_SFT.kind": "one choice (adamw)",
    "OPTIMIZER_RL.kind": "one choice (adamw)",
    "EXECUTION.engine": "one choice (transformers)",
    "EXECUTION.keepAdapters": "the service prunes saved adapters (jobs/saves.py)",
    "EXECUTION.hostMemoryGiB": "picks the device profile and its capacity claim",
    "EXECUTION.gpus": "picks the device profile (several devices: tests/jobs multi-device)",
    "DATA.validationDataset": "a registry reference the service resolves for the spec",
    "DATA.packing": "refused on a supervised run (plan/rules/training.py)",
    "RL_LOOP.reward": "pinned by the kind's accept into the spec's grader",
    "rollout.cuda_graphs": "refused when stated: the loop samples without CUDA graphs",
}
"""Plan defaults that do not reach the worker's settings, and where they go instead."""


def _groups() -> list[tuple[str, str, dict[str, Any], str, Any]]:
    """``(id, method, defaults dict, key, value)`` for every dict-held default."""
    groups = {
        "LORA_SFT": ("sft", D.LORA_SFT),
        "OPTIMIZER_SFT": ("sft", D.OPTIMIZER_SFT),
        "SCHEDULER_SFT": ("sft", D.SCHEDULER_SFT),
        "TRAINING_SFT": ("sft", D.TRAINING_SFT),
        "LOSS": ("sft", D.LOSS),
        "DATA": ("sft", D.DATA),
        "EXECUTION": ("sft", D.EXECUTION),
        "LORA_RL": ("rl", D.LORA_RL),
        "OPTIMIZER_RL": ("rl", D.OPTIMIZER_RL),
        "SCHEDULER_RL": ("rl", D.SCHEDULER_RL),
        "RL_LOOP": ("rl", D.RL_LOOP),
    }
    return [
        (f"{g}.{k}", method, table, k, v)
        for g, (method, table) in groups.items()
        for k, v in table.items()
    ]


def _resolve(method: str, gpus: int = 1) -> dict[str, Any]:
    """A plan stating nothing but its loop and devices, resolved now (today's defaults)."""
    return resolved_plan(gpus, method)


def _skipped(name: str) -> bool:
    return any(name.endswith(k) or name == k for k in NOT_THE_WORKERS)


@pytest.mark.parametrize(
    ("name", "method", "table", "key", "value"), _groups(), ids=[g[0] for g in _groups()]
)
def test_each_plan_default_reaches_the_worker(
    monkeypatch: pytest.MonkeyPatch, name: str, method: str, table: dict, key: str, value: Any
) -> None:
    """Change one default of plan/defaults.py; a plan stating nothing then sends the
    worker something else (or the default is listed in NOT_THE_WORKERS with its use). A
    supervised plan runs on two devices, where every training field applies."""
    if _skipped(name):
        return
    gpus = 2 if method == "sft" else 1
    before = _reaching(_resolve(method, gpus))
    other = _other(key, value)
    assert other is not None, name
    if key == "microBatchPerGpu":  # a pass of 5 conversations: still an allowed shape
        other = 5
    monkeypatch.setitem(table, key, other)
    after = _reaching(_resolve(method, gpus))
    assert after != before, f"{name}: the default {value!r} → {other!r} did not reach the worker"


def test_max_seq_length_and_the_model_defaults_reach_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _reaching(_resolve("sft"))
    monkeypatch.setattr(D, "MAX_SEQ_LENGTH", 1024)
    assert _reaching(_resolve("sft"))["token_budget"] == 1024 != before["token_budget"]
    monkeypatch.undo()
    real = D.model
    for key, other in {
        "precision": "bf16",
        "gradientCheckpointing": True,
        "attentionImplementation": "eager",
    }.items():

        def model(kind: str, wp: str, key: str = key, other: Any = other) -> dict[str, Any]:
            return {**real(kind, wp), key: other}

        monkeypatch.setattr(D, "model", model)
        assert _reaching(_resolve("sft")) != before, key
        monkeypatch.undo()


@pytest.mark.parametrize(("method", "gpus"), [("sft", 2), ("rl", 1)])
def test_each_engine_setting_default_reaches_the_worker(
    monkeypatch: pytest.MonkeyPatch, method: str, gpus: int
) -> None:
    """Every declared engine setting of the loop (engine_settings.py): its default
    changed, a plan stating nothing sends the worker something else."""
    loop = "rl" if method == "rl" else "sft"
    before = _reaching(_resolve(method, gpus))
    for s in ES.SETTINGS:
        if loop not in s.loops or _skipped(s.key):
            continue
        other = _other(s.key, s.default)
        if s.key == "dtypes.compute":
            other = "fp32"  # null follows config.model.precision (bf16 on the H100 profile)
        if s.key == "engine.pad_to_length_bucket":
            other = 512
        changed = dataclasses.replace(s, default=other)
        monkeypatch.setattr(R, "SETTINGS", tuple(changed if x is s else x for x in ES.SETTINGS))
        after = _reaching(_resolve(method, gpus))
        monkeypatch.undo()
        assert after != before, f"{s.key}: the default {s.default!r} did not reach the worker"


def test_a_resolved_plan_missing_a_field_is_refused_naming_it() -> None:
    """A renamed or dropped field is never replaced by a default: reading it fails,
    naming the path, before any worker starts."""
    plan = resolved_plan(1)
    del plan["config"]["data"]["onTooLong"]
    with pytest.raises(InvalidRequest) as err:
        mapping.engine_settings(plan, TARGETS, AUTO, "cpu")
    assert err.value.field == "config.data.onTooLong"
    assert err.value.code == "resolved_plan_invalid"
    renamed = resolved_plan(1)
    lora = renamed["config"]["hyperparams"]["lora"]
    lora["r"] = lora.pop("rank")
    with pytest.raises(InvalidRequest) as err:
        typed_plan(renamed)
    assert "config.hyperparams.lora" in err.value.field
    two = resolved_plan(2)
    del two["config"]["engineSettings"]["dtypes.reduce"]
    with pytest.raises(InvalidRequest) as err:
        mapping.engine_settings(two, TARGETS, AUTO, "cpu")
    assert err.value.field == "config.engineSettings.dtypes.reduce"


def test_on_too_long_follows_the_plan_default_refuse() -> None:
    """The mapping's old fallback said ``drop``; the plan's default is ``refuse``
    (plan/defaults.py DATA), and that is what the worker gets."""
    assert mapping.worker_settings(typed_plan(_resolve("sft")))["on_too_long"] == "refuse"
    assert D.DATA["onTooLong"] == "refuse"
