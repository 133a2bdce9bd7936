"""Run plans through the real service and CLI: every acceptance case and hash pair over
HTTP, projects, the dry run and config-schema commands, and mutated plans over HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from plan_fakes import FULL_SFT_PLAN, SEED_040_PLAN, load_cases
from test_plan_resolve import mutated_plans

from helpers import LiveService, free_port

PLAN_CASES = load_cases("plans.jsonl")
HASH_CASES = load_cases("plan-hash-pairs.jsonl")
MINIMAL = PLAN_CASES[0]["plan"]
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"ticket {i}"},
            {"role": "assistant", "content": f"billing {i}"},
        ]
    }
    for i in range(4)
]


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """A service with project ``triage`` and datasets ``triage/train`` and ``triage/val``
    created through the real API (tests/cases/README.md assumptions)."""
    tmp = tmp_path_factory.mktemp("plan-svc")
    s = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port()).start()
    try:
        assert s.api("POST", "/v1/training/projects", json={"name": "triage"}).status_code == 201
        body = "\n".join(json.dumps(r) for r in ROWS).encode()
        for name in ("train", "val"):
            r = s.api("POST", f"/v1/registry/datasets/triage/{name}", content=body)
            assert r.status_code in (200, 201), r.text
        yield s
    finally:
        s.stop()


def dry_run(svc: LiveService, plan: Any) -> Any:
    return svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan)


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c["name"] for c in PLAN_CASES])
def test_plan_cases_over_http(svc: LiveService, case: dict[str, Any]) -> None:
    r = dry_run(svc, case["plan"])
    exp = case["expect"]
    if exp.get("accepted"):
        assert r.status_code == 200, r.text
        assert len(r.json()["configHash"]) == 64
        return
    assert r.status_code == exp["status"], r.text
    err = r.json()["error"]
    text = f"{err['field']} {err['message']}"
    for m in exp.get("error_mentions", []):
        assert m in text
    for m in exp.get("error_excludes", []):
        assert m not in text.lower()
    if "limit" in exp:  # README: a refusal names the full path and the limit
        detail = err["details"][0]
        assert detail["field"] == err["field"] and detail["limit"] == exp["limit"], detail
        assert exp["limit_mentions"] in err["message"]


@pytest.mark.parametrize("case", HASH_CASES, ids=[c["name"] for c in HASH_CASES])
def test_hash_pairs_over_http(svc: LiveService, case: dict[str, Any]) -> None:
    a = dry_run(svc, case["a"]).json()["configHash"]
    b = dry_run(svc, case["b"]).json()["configHash"]
    assert (a == b) is case["same_hash"]


def test_rl_case_resolves_rl_learning_rate(svc: LiveService) -> None:
    case = next(c for c in PLAN_CASES if c["name"] == "rl-one-optimizer-field-keeps-rl-defaults")
    report = dry_run(svc, case["plan"]).json()
    opt = report["resolved"]["config"]["rlHyperparams"]["optimizer"]
    sft = dry_run(svc, MINIMAL).json()["resolved"]["config"]["hyperparams"]["optimizer"]
    assert opt["weightDecay"] == 0.0 and opt["learningRate"] != sft["learningRate"]


def test_dry_run_pins_dataset_and_creates_nothing(svc: LiveService) -> None:
    report = dry_run(svc, MINIMAL).json()
    assert report["pinned"]["config.dataset"].startswith("triage/train:v1@sha256:")
    assert report["resolved"]["config"]["dataset"] == report["pinned"]["config.dataset"]
    assert report["deviceProfile"] == "cpu"
    runs = svc.api("GET", "/v1/training/runs")
    assert runs.status_code == 200, runs.text
    assert runs.json()["runs"] == []


def test_seed_040_example_and_unqualified_reference_are_accepted(svc: LiveService) -> None:
    r = dry_run(svc, SEED_040_PLAN)
    assert r.status_code == 200, r.text
    plan = copy.deepcopy(MINIMAL)
    plan["config"]["dataset"] = "Train"
    pinned = dry_run(svc, plan).json()["pinned"]["config.dataset"]
    assert pinned.startswith("triage/train:v1@")


def test_refused_submit_lists_every_refusal(svc: LiveService) -> None:
    plan = copy.deepcopy(FULL_SFT_PLAN)
    plan["config"]["hyperparams"]["lora"]["rank"] = 128
    plan["config"]["engineSettings"]["head.chunk_tokens"] = 0
    r = svc.api("POST", "/v1/training/runs", json=plan)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["field"] == "config.hyperparams.lora.rank"
    assert [d["field"] for d in err["details"]] == [
        "config.hyperparams.lora.rank",
        "config.engineSettings.head.chunk_tokens",
    ]
    assert err["details"][0]["limit"] == 64


def test_body_with_infinity_is_refused(svc: LiveService) -> None:
    body = json.dumps(MINIMAL)[:-1] + ', "smoke": Infinity}'
    r = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, content=body.encode())
    assert r.status_code == 400 and "Infinity" in r.json()["error"]["message"]


def test_body_that_is_not_json_names_the_body(svc: LiveService) -> None:
    r = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, content=b'{"kind": ')
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "body" and "line 1" in r.json()["error"]["message"]


def test_projects_create_list_get(svc: LiveService) -> None:
    out = svc.cli("training", "projects", "create", "gsm8k", check=True)
    assert "gsm8k" in out.stdout
    again = svc.cli("training", "projects", "create", "GSM8K")
    assert again.returncode == 1 and "already exists" in again.stderr
    bad = svc.cli("training", "projects", "create", "no spaces")
    assert bad.returncode == 1 and "not a valid name" in bad.stderr
    listed = svc.cli("training", "projects", "list", check=True).stdout
    assert "gsm8k" in listed and "triage" in listed
    data = json.loads(svc.cli("training", "projects", "list", "-o", "json", check=True).stdout)
    ids = {p["name"]: p["id"] for p in data["projects"]}
    assert ids["gsm8k"] not in listed
    got = json.loads(
        svc.cli("training", "projects", "get", "gsm8k", "-o", "json", check=True).stdout
    )
    assert got["id"] == ids["gsm8k"]
    missing = svc.cli("training", "projects", "get", "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr
    assert svc.api("PUT", "/v1/training/projects/gsm8k/name", json={"name": "x"}).status_code in (
        404,
        405,
    )


def unselected_dry_run(svc: LiveService, *args: str) -> str:
    """A CLI dry run of a plan whose base model this service never selected: the report is
    printed, then the refusal the start would give, and the command exits 1."""
    out = svc.cli("training", "runs", "start", *args, "--dry-run")
    assert out.returncode == 1, out.stderr
    assert "The start would be refused (1 reason):" in out.stderr
    assert "akka-optimize training base-models select" in out.stderr
    return out.stdout


def test_cli_dry_run_prints_settings_hash_and_refusals(svc: LiveService, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(SEED_040_PLAN))
    out = unselected_dry_run(svc, "-f", str(plan), "--show-resolved")
    assert "Configuration hash: " in out and "nothing was created" in out
    assert "lora: rank=16* alpha=32 dropout=0.05" in out
    assert "data types: compute=bf16* weights=fp32" in out
    brief = unselected_dry_run(svc, "-f", str(plan))
    assert "optimizer: learningRate=0.0001 weightDecay=0.05" in brief and "dropout" not in brief
    bad = copy.deepcopy(FULL_SFT_PLAN)
    bad["baseModel"] = "google/gemma-4-12B-it"
    bad["config"]["hyperparams"]["training"]["tokensPerGpu"] = 2048
    plan.write_text(json.dumps(bad))
    out = svc.cli("training", "runs", "start", "-f", str(plan), "--dry-run")
    assert out.returncode == 1
    assert "config.engineSettings.kernels.liger.rms_norm" in out.stderr
    assert "google/gemma-4-12B-it" in out.stderr
    plan.write_text('{\n  "kind": run\n}')
    out = svc.cli("training", "runs", "start", "-f", str(plan), "--dry-run")
    assert out.returncode == 1 and f"{plan}:2" in out.stderr


def test_config_schema_command(svc: LiveService) -> None:
    out = svc.cli("config-schema", "--field", "config.hyperparams.lora.rank", check=True)
    rank = json.loads(out.stdout)
    assert rank["default"] == 16 and "endpoints" in rank["description"]
    whole = json.loads(svc.cli("config-schema", check=True).stdout)
    engine = whole["properties"]["config"]["properties"]["engineSettings"]["properties"]
    assert engine["head.chunk_tokens"]["default"] == 512
    yaml_out = svc.cli("config-schema", "--field", "execution.gpus", "--format", "yaml", check=True)
    assert "description:" in yaml_out.stdout
    bad = svc.cli("config-schema", "--field", "config.hyperparams.lora.rnak")
    assert bad.returncode == 1 and "rank" in bad.stderr


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated_plans())
def test_mutated_plans_over_http_never_fail_the_service(svc: LiveService, plan: Any) -> None:
    r = dry_run(svc, plan)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:  # a refusal names the field it refuses
        err = r.json()["error"]
        assert err["field"] and err["field"] in err["message"]
    else:  # an accepted plan is hashed
        assert len(r.json()["configHash"]) == 64


def test_dry_run_reports_duplicate_rows(svc: LiveService, tmp_path: Path) -> None:
    rows = ROWS[:2] + [ROWS[0]]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    assert svc.api("POST", "/v1/registry/datasets/triage/dups", content=body).status_code in (
        200,
        201,
    )
    plan = copy.deepcopy(MINIMAL)
    plan["config"]["dataset"] = "dups"
    findings = dry_run(svc, plan).json()["findings"]
    assert findings["rows"] == 3
    assert findings["exact_duplicates"] == [[1, 3]]
    assert findings["dataset"].startswith("triage/dups:v1@sha256:")
    assert "tokenizer" in findings["tokenFindings"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    out = unselected_dry_run(svc, "-f", str(path))
    assert "exact duplicates (row groups): 1: [[1, 3]]" in out
