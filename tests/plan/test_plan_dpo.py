"""Preference plans (issue 50 item 1): ``config.method: dpo`` with ``dpoHyperparams``,
per-loop defaults, the hash, the dry run's settings lines, and the refusals that name
their fields (seeds/004 §1.4: label smoothing for DPO only)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from plan_fakes import FakeEnv

from akka_optimize.plan import PlanRefused, resolve_plan
from akka_optimize.plan.dryrun import settings_lines

DPO: dict[str, Any] = {
    "kind": "run",
    "project": "triage",
    "baseModel": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "config": {"dataset": "triage/train", "method": "dpo"},
}


def plan(**hp: Any) -> dict[str, Any]:
    out = copy.deepcopy(DPO)
    if hp:
        out["config"]["dpoHyperparams"] = hp
    return out


def refused(p: dict[str, Any]) -> PlanRefused:
    with pytest.raises(PlanRefused) as info:
        resolve_plan(p, FakeEnv())
    return info.value


def test_a_minimal_preference_plan_takes_the_preference_defaults() -> None:
    r = resolve_plan(plan(), FakeEnv())
    hp = r.plan["config"]["dpoHyperparams"]
    assert r.method == "dpo" and r.hyperparams is hp
    assert hp["beta"] == 0.1 and hp["lossTypes"] == ["sigmoid"] and hp["lossWeights"] == [1.0]
    assert hp["labelSmoothing"] == 0.0 and hp["optimizer"]["learningRate"] == 5e-5
    assert hp["lora"] == {"rank": 16, "alpha": 32.0, "dropout": 0.0}
    assert "hyperparams" not in r.plan["config"] and r.plan["config"]["loss"] is None
    assert r.plan["config"]["engineSettings"] == {} and r.plan["execution"]["memory"] is None


def test_a_stated_field_keeps_the_other_preference_defaults() -> None:
    r = resolve_plan(
        plan(optimizer={"learningRate": 1e-4}, lossTypes=["sigmoid", "ipo"]), FakeEnv()
    )
    hp = r.plan["config"]["dpoHyperparams"]
    assert hp["optimizer"] == {
        "kind": "adamw",
        "learningRate": 1e-4,
        "weightDecay": 0.0,
        "maxGradNorm": 1.0,
    }
    assert hp["lossWeights"] == [1.0, 1.0]
    assert "config.dpoHyperparams.lossTypes" in r.stated


def test_every_preference_field_is_in_the_hash() -> None:
    base = resolve_plan(plan(), FakeEnv()).config_hash
    same = resolve_plan(plan(beta=0.1, lossTypes=["sigmoid"]), FakeEnv()).config_hash
    assert same == base
    for hp in (
        {"beta": 0.2},
        {"lossTypes": ["ipo"]},
        {"lossWeights": [0.5]},
        {"labelSmoothing": 0.1},
        {"microBatchPerGpu": 2},
        {"gradientAccumulation": 2},
        {"epochs": 3},
        {"seed": 7},
        {"maxSteps": 5},
    ):
        assert resolve_plan(plan(**hp), FakeEnv()).config_hash != base, hp


def test_the_dry_run_shows_the_preference_loop_line_with_stated_marks() -> None:
    r = resolve_plan(
        plan(beta=0.25, lossTypes=["sigmoid", "ipo"], lossWeights=[1.0, 0.5]), FakeEnv()
    )
    text = [line["text"] for line in settings_lines(r)]
    loop = next(t for t in text if t.startswith("loop:"))
    assert "beta=0.25*" in loop and "lossTypes=sigmoid,ipo*" in loop
    assert "lossWeights=1,0.5*" in loop and "labelSmoothing=0 " in loop
    assert any(t.startswith("lora: rank=16") for t in text)


def test_label_smoothing_with_ipo_is_refused_naming_both_fields() -> None:
    err = refused(plan(lossTypes=["sigmoid", "ipo"], labelSmoothing=0.1))
    assert err.field == "config.dpoHyperparams.labelSmoothing"
    assert "config.dpoHyperparams.lossTypes" in err.message and "ipo" in err.message


def test_label_smoothing_with_sigmoid_is_accepted() -> None:
    r = resolve_plan(plan(labelSmoothing=0.1), FakeEnv())
    assert r.plan["config"]["dpoHyperparams"]["labelSmoothing"] == 0.1


@pytest.mark.parametrize(
    ("hp", "field", "mention"),
    [
        ({"lossWeights": [1.0, 0.5]}, "config.dpoHyperparams.lossWeights", "one weight per"),
        ({"lossTypes": ["hinge"]}, "config.dpoHyperparams.lossTypes", "sigmoid"),
        ({"lossTypes": []}, "config.dpoHyperparams.lossTypes", "at least 1"),
        ({"lossTypes": ["ipo", "ipo"]}, "config.dpoHyperparams.lossTypes", "twice"),
        ({"beta": 0}, "config.dpoHyperparams.beta", "greater than 0"),
        ({"labelSmoothing": 0.5}, "config.dpoHyperparams.labelSmoothing", "0.5"),
        ({"microBatchPerGpu": 0}, "config.dpoHyperparams.microBatchPerGpu", "1"),
        ({"lora": {"rank": 4096}}, "config.dpoHyperparams.lora.rank", "largest adapter rank"),
        ({"lossWeights": [2000.0]}, "config.dpoHyperparams.lossWeights[0]", "1000"),
        ({"gamma": 1}, "config.dpoHyperparams.gamma", ""),
    ],
)
def test_a_preference_field_out_of_bounds_is_refused_naming_it(
    hp: dict[str, Any], field: str, mention: str
) -> None:
    err = refused(plan(**hp))
    fields = [d["field"] for d in err.details]
    assert any(f == field or f.startswith(field + ".") for f in fields), fields
    assert mention in " ".join(d["message"] for d in err.details)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("hyperparams", {"training": {"epochs": 2}}),
        ("rlHyperparams", {"steps": 3}),
        ("loss", {"assistantTurns": "all"}),
        ("data", {"packing": True}),
        ("engineSettings", {"head.chunk_tokens": 256}),
    ],
)
def test_a_group_a_preference_run_does_not_read_is_refused(path: str, value: Any) -> None:
    p = plan()
    p["config"][path] = value
    err = refused(p)
    fields = [d["field"] for d in err.details]
    assert any(f.startswith(f"config.{path}") for f in fields), fields


def test_dpo_hyperparams_on_a_supervised_run_are_refused() -> None:
    p = plan(beta=0.2)
    p["config"]["method"] = "sft"
    err = refused(p)
    assert err.field == "config.dpoHyperparams" and "method dpo" in err.message
