"""Plan resolution against a fake environment: every acceptance case, the hash pairs,
per-loop defaults, refusals that name the field and the ceiling, and mutated plans."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_fakes import FULL_SFT_PLAN, SEED_040_PLAN, FakeEnv, load_cases

from akka_optimize.plan import PlanRefused, resolve_plan
from akka_optimize.plan import defaults as D
from akka_optimize.plan.dryrun import dry_run_report
from akka_optimize.plan.hashing import canonical_json

PLAN_CASES = load_cases("plans.jsonl")
HASH_CASES = load_cases("plan-hash-pairs.jsonl")
MINIMAL = PLAN_CASES[0]["plan"]


def refused(plan: Any, env: FakeEnv | None = None) -> PlanRefused:
    with pytest.raises(PlanRefused) as info:
        resolve_plan(plan, env or FakeEnv())
    return info.value


def with_(plan: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(plan)
    node = out
    head, sep, key = path.partition("engineSettings.")
    parts = (head + "engineSettings").split(".") + [key] if sep else path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c["name"] for c in PLAN_CASES])
def test_every_plan_case_gets_its_outcome(case: dict[str, Any]) -> None:
    exp = case["expect"]
    if exp.get("accepted"):
        r = resolve_plan(case["plan"], FakeEnv())
        assert len(r.config_hash) == 64
        return
    err = refused(case["plan"])
    assert err.status == exp["status"]
    text = f"{err.field} {err.message}"
    for m in exp.get("error_mentions", []):
        assert m in text
    for m in exp.get("error_excludes", []):
        assert m not in text.lower()
    if "limit" in exp:  # README: a refusal names the full path and the limit
        assert err.details[0]["field"] == err.field and err.details[0]["limit"] == exp["limit"]
        assert exp["limit_mentions"] in err.message
    assert all(set(d) == {"field", "message", "value", "limit"} for d in err.details)


@pytest.mark.parametrize("case", HASH_CASES, ids=[c["name"] for c in HASH_CASES])
def test_hash_pairs(case: dict[str, Any]) -> None:
    env = FakeEnv()
    a = resolve_plan(case["a"], env).config_hash
    b = resolve_plan(case["b"], env).config_hash
    assert (a == b) is case["same_hash"]


def test_rl_plan_stating_one_optimizer_field_keeps_rl_defaults() -> None:
    plan = with_(MINIMAL, "config.method", "rl")
    plan = with_(plan, "config.rlHyperparams", {"optimizer": {"weightDecay": 0.01}})
    hp = resolve_plan(plan, FakeEnv()).plan["config"]["rlHyperparams"]
    assert hp["optimizer"] == {**D.OPTIMIZER_RL, "weightDecay": 0.01}
    assert hp["optimizer"]["learningRate"] != D.OPTIMIZER_SFT["learningRate"]
    assert hp["scheduler"] == D.SCHEDULER_RL


def test_rl_plan_states_the_loss_aggregation_advantages_correction_and_staleness() -> None:
    """Issue 52 items 2–5: the new rlHyperparams fields resolve with their defaults, a
    stated value is kept, and a bad one is refused naming its path."""
    plan = with_(MINIMAL, "config.method", "rl")
    hp = resolve_plan(plan, FakeEnv()).plan["config"]["rlHyperparams"]
    assert (hp["lossFn"], hp["lossAggregation"], hp["advantageNormalization"]) == (
        "importance_sampling",
        "token_mean",
        "population_std",
    )
    assert (hp["rolloutCorrection"], hp["rolloutCorrectionCap"], hp["maxStaleness"]) == (
        "none",
        3.0,
        0,
    )
    stated = {"lossFn": "gspo", "lossAggregation": "dr_grpo", "maxStaleness": 2,
              "advantageNormalization": "sample_std", "rolloutCorrection": "sequence_mask"}  # fmt: skip
    hp = resolve_plan(with_(plan, "config.rlHyperparams", stated), FakeEnv()).plan["config"]
    assert {k: hp["rlHyperparams"][k] for k in stated} == stated
    for field, value in (("maxStaleness", 65), ("rolloutCorrectionCap", 1.0),
                         ("lossAggregation", "seq_mean"), ("lossFn", "grpo")):  # fmt: skip
        err = refused(with_(plan, "config.rlHyperparams", {field: value}))
        assert err.field == f"config.rlHyperparams.{field}", err


def test_sft_defaults_suit_a_small_model_on_the_cpu() -> None:
    r = resolve_plan(MINIMAL, FakeEnv())
    hp = r.plan["config"]["hyperparams"]
    assert (hp["lora"]["rank"], hp["lora"]["alpha"]) == (16, 32.0)
    assert hp["optimizer"]["learningRate"] == 2e-4
    assert r.plan["config"]["model"]["precision"] == "fp32"
    assert r.device_profile.name == "cpu"
    assert r.plan["config"]["engineSettings"] == {}
    assert r.plan["execution"]["memory"] is None
    assert r.plan["modelName"] == "triage/smollm2-135m-instruct"
    assert r.plan["config"]["dataset"].startswith("triage/train:v1@sha256:")


def test_stated_paths_mark_what_the_plan_said() -> None:
    r = resolve_plan(FULL_SFT_PLAN, FakeEnv())
    assert "config.hyperparams.lora.rank" in r.stated
    assert "config.engineSettings.head.chunk_tokens" in r.stated
    assert "config.hyperparams.training.maxSteps" not in r.stated
    line = next(x for x in dry_run_report(r)["settings"] if x["group"] == "lora")
    assert line["text"] == "lora: rank=32* alpha=64* dropout=0.1*"


def test_hash_changes_with_every_trained_under_field() -> None:
    env = FakeEnv()
    base = resolve_plan(FULL_SFT_PLAN, env).config_hash
    for path, value in [
        ("config.hyperparams.optimizer.weightDecay", 0.06),
        ("config.engineSettings.head.chunk_tokens", 128),
        ("config.model.weightPrecision", "fp32"),
        ("config.data.validationDataset", "triage/train"),
        ("execution.gpus", 8),
        ("execution.memory.sharding", "full"),
    ]:
        assert resolve_plan(with_(FULL_SFT_PLAN, path, value), env).config_hash != base, path
    for path, value in [("submissionId", "other"), ("execution.keepRecoverable", 5)]:
        assert resolve_plan(with_(FULL_SFT_PLAN, path, value), env).config_hash == base, path


def test_hash_ignores_key_order_and_stated_defaults() -> None:
    env = FakeEnv()
    shuffled = json.loads(canonical_json(FULL_SFT_PLAN))  # keys sorted
    assert resolve_plan(shuffled, env).config_hash == resolve_plan(FULL_SFT_PLAN, env).config_hash
    explicit = with_(FULL_SFT_PLAN, "config.engineSettings.compile.recompile_limit", 8)
    explicit = with_(explicit, "execution.engine", "transformers")
    assert resolve_plan(explicit, env).config_hash == resolve_plan(FULL_SFT_PLAN, env).config_hash


def test_seed_040_example_is_accepted() -> None:
    r = resolve_plan(SEED_040_PLAN, FakeEnv())
    assert r.device_profile.name == "H100"
    assert r.plan["config"]["hyperparams"]["training"]["epochs"] == 4
    assert r.plan["config"]["model"]["precision"] == "bf16"


def test_a_dry_run_reports_every_refusal() -> None:
    plan = with_(MINIMAL, "config.hyperparams.lora.rank", 128)
    plan = with_(plan, "config.hyperparams.training.tokensPerGpu", 4096)
    plan = with_(plan, "execution.memory", {"sharding": "none"})
    err = refused(plan)
    fields = [d["field"] for d in err.details]
    assert fields == [
        "config.hyperparams.lora.rank",
        "config.hyperparams.training.tokensPerGpu",
        "execution.memory.sharding",
    ]
    assert err.details[0]["limit"] == 64 and "64" in err.details[0]["message"]
    assert err.field == fields[0]
    assert all(f in err.message for f in fields)


def test_unknown_project_and_dataset_name_the_field() -> None:
    assert refused(with_(MINIMAL, "project", "nobody")).field == "project"
    err = refused(with_(MINIMAL, "config.dataset", "triage/missing"))
    assert err.field == "config.dataset" and "triage/missing" in err.message
    err = refused(with_(MINIMAL, "baseModel", "acme/unknown-7B"))
    assert err.field == "baseModel" and "catalog" in err.message


def test_host_memory_names_the_devices_that_qualify() -> None:
    plan = with_(MINIMAL, "execution", {"gpus": 1, "deviceProfile": "H200", "hostMemoryGiB": 200})
    err = refused(plan)
    assert err.field == "execution.hostMemoryGiB"
    assert "H100" in err.message and "120" in err.message


def test_gemma4_rules() -> None:
    ok = resolve_plan(FULL_SFT_PLAN, FakeEnv())
    assert ok.plan["config"]["model"]["attentionImplementation"] == "flex_attention"
    b12 = with_(FULL_SFT_PLAN, "baseModel", "google/gemma-4-12B-it")
    b12 = with_(b12, "config.hyperparams.training.tokensPerGpu", 2048)
    err = refused(b12)
    assert err.field == "config.engineSettings.kernels.liger.rms_norm"
    assert "google/gemma-4-12B-it" in err.message
    bucket = with_(FULL_SFT_PLAN, "config.engineSettings.engine.pad_to_length_bucket", 64)
    assert refused(bucket).field == "config.engineSettings.engine.pad_to_length_bucket"
    off = with_(FULL_SFT_PLAN, "config.engineSettings.engine.pad_to_length", False)
    assert refused(off).field == "config.engineSettings.engine.pad_to_length"
    over = with_(FULL_SFT_PLAN, "config.hyperparams.training.tokensPerGpu", 9000)
    err = refused(over)
    assert err.field == "config.hyperparams.training.tokensPerGpu" and "8192" in err.message


def test_packing_bounds_need_dynamic_batches() -> None:
    plan = with_(FULL_SFT_PLAN, "config.data.use_dynamic_bsz", False)
    plan = with_(plan, "config.hyperparams.training.microBatchPerGpu", 1)
    plan = with_(plan, "config.engineSettings.checks.isolation.max_logprob_error", 0.01)
    err = refused(plan)
    assert err.field == "config.engineSettings.checks.isolation.max_logprob_error"
    packing = with_(FULL_SFT_PLAN, "config.data.packing", True)
    packing = with_(packing, "config.data.use_dynamic_bsz", False)
    packing = with_(packing, "config.hyperparams.training.microBatchPerGpu", 1)
    err = refused(packing)
    assert err.field == "config.data.packing" and "one conversation per pass" in err.message


def test_one_conversation_per_pass_sets_micro_batch_to_one() -> None:
    plan = copy.deepcopy(FULL_SFT_PLAN)
    del plan["config"]["hyperparams"]["training"]["microBatchPerGpu"]
    plan = with_(plan, "config.data.use_dynamic_bsz", False)
    r = resolve_plan(plan, FakeEnv())
    assert r.plan["config"]["hyperparams"]["training"]["microBatchPerGpu"] == 1
    data_line = next(x for x in dry_run_report(r)["settings"] if x["group"] == "data")
    assert "one conversation per pass" in data_line["text"]


def test_deployment_disallowing_a_setting_names_it() -> None:
    env = FakeEnv()
    env.deployment = env.deployment.model_copy(deep=True)
    env.deployment.engineSettings.allowed = ["checks.*"]
    err = refused(FULL_SFT_PLAN, env)
    assert {d["field"] for d in err.details} == {
        "config.engineSettings.head.chunk_tokens",
        "config.engineSettings.engine.pad_to_length_bucket",
        "config.engineSettings.kernels.liger.rms_norm",
        "config.engineSettings.dtypes.reduce",
    }


# -- mutations: accepted, or refused naming a field; never anything else ----------------
def _leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node and not prefix.endswith("engineSettings"):
        return [
            p for k, v in node.items() for p in _leaf_paths(v, f"{prefix}.{k}" if prefix else k)
        ]
    if isinstance(node, dict):
        return [f"{prefix}.{k}" for k in node] or [prefix]
    return [prefix]


PATHS = sorted(set(_leaf_paths(FULL_SFT_PLAN)) | {"config", "execution", "config.hyperparams"})
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutated_plans(draw: st.DrawFn) -> Any:
    plan = copy.deepcopy(draw(st.sampled_from([FULL_SFT_PLAN, MINIMAL, SEED_040_PLAN])))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        action = draw(st.sampled_from(["set", "delete", "extra"]))
        parts = path.split(".")
        if parts[0] == "config" and "engineSettings" in parts:
            parts = parts[: parts.index("engineSettings") + 1] + [
                ".".join(parts[parts.index("engineSettings") + 1 :])
            ]
        node = plan
        for p in parts[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(p, {})
        if not isinstance(node, dict):
            continue
        if action == "set":
            node[parts[-1]] = draw(JSON_VALUES)
        elif action == "delete":
            node.pop(parts[-1], None)
        else:
            node[draw(st.text(min_size=1, max_size=8))] = draw(JSON_VALUES)
    return plan


def check_outcome(plan: Any, env: FakeEnv) -> None:
    try:
        r = resolve_plan(plan, env)
    except PlanRefused as err:
        assert err.status == 400
        assert err.details and all(d["message"] for d in err.details)
        if isinstance(plan, dict):
            assert err.field, err.message
        json.dumps(err.details)
        return
    assert len(r.config_hash) == 64
    json.dumps(dry_run_report(r))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plans())
def test_mutated_plans_are_accepted_or_refused_naming_a_field(plan: Any) -> None:
    check_outcome(plan, FakeEnv())


def test_non_finite_numbers_are_refused_naming_the_field() -> None:
    err = refused(
        with_(FULL_SFT_PLAN, "config.engineSettings.checks.head.max_logprob_error", float("inf"))
    )
    assert err.field == "config.engineSettings.checks.head.max_logprob_error"
    assert refused(with_(MINIMAL, "config.hyperparams.lora.alpha", float("nan"))).field == (
        "config.hyperparams.lora.alpha"
    )


@settings(max_examples=50, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_is_accepted_or_refused(value: Any) -> None:
    check_outcome(value, FakeEnv())


def test_an_unknown_field_gets_a_did_you_mean_or_the_group_that_has_it() -> None:
    err = refused(with_(MINIMAL, "config.hyperparams.lora.rnak", 8))
    assert err.field == "config.hyperparams.lora.rnak"
    assert "Did you mean 'rank'?" in err.message
    err = refused(with_(MINIMAL, "config.hyperparams.training.learningRate", 1e-4))
    assert err.field == "config.hyperparams.training.learningRate"
    assert "learningRate is a field of config.hyperparams.optimizer" in err.message


def test_one_conversation_per_pass_with_a_micro_batch_above_one_is_refused() -> None:
    plan = with_(FULL_SFT_PLAN, "config.data.use_dynamic_bsz", False)
    err = refused(with_(plan, "config.hyperparams.training.microBatchPerGpu", 4))
    fields = [d["field"] for d in err.details]
    assert "config.hyperparams.training.microBatchPerGpu" in fields
    msg = next(d["message"] for d in err.details if d["field"].endswith("microBatchPerGpu"))
    assert "microBatchPerGpu 4" in msg and "config.data.use_dynamic_bsz false" in msg


def test_data_packing_is_refused_on_one_device_naming_the_field() -> None:
    one = with_(FULL_SFT_PLAN, "execution.gpus", 1)
    for value in (True, False):
        err = refused(with_(one, "config.data.packing", value))
        d = next(d for d in err.details if d["field"] == "config.data.packing")
        assert "on one device" in d["message"] and "use_dynamic_bsz" in d["message"]
