"""The keep rule of curations and the shape checks of pipeline descriptors, without a
service (issue 19 items 1-2): what is kept, and which field a refusal names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import akka_optimize.service  # noqa: F401 (the service's modules first, as the service imports them)
from akka_optimize.core.pipelines.records import references, shape
from akka_optimize.errors import InvalidRequest
from akka_optimize.evals.curation.kind import (
    Keep,
    curation_messages,
    kept_rows,
    output_names,
    parse_keep,
)

SCORES = [0.9, None, 0.3, 0.7, 0.7, 1.0]


@pytest.mark.parametrize(
    ("keep", "kept"),
    [
        (Keep(minScore=0.7), [0, 3, 4, 5]),  # at least 0.7; the unscored row never
        (Keep(topShare=0.5), [0, 3, 5]),  # ceil(0.5 * 6) = 3 best, ties by row order
        (Keep(minScore=0.8, topShare=0.5), [0, 5]),  # both rules
        (Keep(topShare=1.0), [0, 2, 3, 4, 5]),
        (Keep(minScore=0.0), [0, 2, 3, 4, 5]),
    ],
)
def test_the_keep_rule_keeps_these_rows_in_source_order(keep: Keep, kept: list[int]) -> None:
    assert kept_rows(SCORES, keep) == kept


@pytest.mark.parametrize(
    ("keep", "field"),
    [
        (None, "keep"),
        ({}, "keep"),
        ({"minScore": 1.5}, "keep.minScore"),
        ({"topShare": 0}, "keep.topShare"),
        ({"topShare": "half"}, "keep.topShare"),
        ({"threshold": 0.5}, "keep.threshold"),
    ],
)
def test_a_bad_keep_rule_is_refused_naming_its_field(keep, field) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_keep(keep)
    assert err.value.field == field


def test_the_output_needs_a_name_of_its_own_and_gets_a_judge_dataset_beside_it() -> None:
    class Source:
        namespace, name = "oasst1", "raw"

    assert output_names("oasst1/curated", "demo", Source) == (
        "oasst1/curated",
        "oasst1/curated-judge",
    )
    assert output_names("curated", "demo", Source)[0] == "demo/curated"
    for bad in (None, "", "oasst1/curated:v2", "oasst1/raw"):
        with pytest.raises(InvalidRequest) as err:
            output_names(bad, "demo", Source)
        assert err.value.field == "dataset"


def test_the_judge_sees_the_conversation_and_its_final_answer() -> None:
    row = {"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "2+2?"},
                        {"role": "assistant", "content": "#### 4"}]}  # fmt: skip
    system, user = curation_messages("Rate it.", row)
    assert system == {"role": "system", "content": "Rate it."}
    assert "user: 2+2?" in user["content"] and "Final assistant answer:\n#### 4" in user["content"]
    assert "Be brief." not in user["content"]


def _pipeline(*stages: dict) -> dict:
    return {"kind": "pipeline", "project": "demo", "stages": list(stages)}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"kind": "run", "project": "demo", "stages": []}, "kind"),
        ({"kind": "pipeline", "stages": [{"kind": "train"}]}, "project"),
        (_pipeline(), "stages"),
        (_pipeline({"kind": "deploy"}), "stages[0].kind"),
        (_pipeline({"kind": "train", "grader": "x"}), "stages[0].grader"),
        (_pipeline({"kind": "train"}, {"kind": "train"}), "stages[1].name"),
        ({**_pipeline({"kind": "train"}), "workload": "x"}, "workload"),
    ],
)
def test_a_descriptor_of_the_wrong_shape_is_refused_naming_the_field(raw, field) -> None:
    with pytest.raises(InvalidRequest) as err:
        shape(raw)
    assert err.value.field == field


def test_stage_references_name_an_earlier_stage_with_the_right_output() -> None:
    ok = shape(_pipeline(
        {"kind": "curate", "dataset": "demo/c"},
        {"kind": "train", "config": {"dataset": "stage:curate"}},
        {"kind": "evaluate", "modelId": "stage:train", "dataset": "stage:curate"},
    ))[1]  # fmt: skip
    assert references(ok) == [{}, {("config", "dataset"): 0},
                               {("modelId",): 1, ("dataset",): 0}]  # fmt: skip
    for stages, field in (
        ([{"kind": "train", "config": {"dataset": "stage:train"}}], "stages[0].config.dataset"),
        ([{"kind": "train"}, {"kind": "evaluate", "modelId": "stage:nope"}], "stages[1].modelId"),
        ([{"kind": "train"}, {"kind": "evaluate", "dataset": "stage:train"}], "stages[1].dataset"),
    ):
        with pytest.raises(InvalidRequest) as err:
            references(shape(_pipeline(*stages))[1])
        assert err.value.field == field


def _props(node: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    for alt in [node, *node.get("anyOf", []), *node.get("oneOf", []), node.get("items") or {}]:
        for key, sub in (alt.get("properties") or {}).items():
            yield f"{path}{key}", sub
            if key != "config":  # a train stage's config is the run descriptor's (tested there)
                yield from _props(sub, f"{path}{key}.")
        if alt is not node and alt.get("oneOf"):
            yield from _props(alt, path)


@pytest.mark.parametrize("kind", ["pipeline", "curation", "evaluation"])
def test_config_schema_documents_every_field_of_the_descriptor(kind: str) -> None:
    """F168: `config-schema --kind pipeline|curation|evaluation` gives each field a
    description; the stages' fields are the ones a stage is checked against."""
    from akka_optimize.plan.pipeline import stage_fields
    from akka_optimize.plan.reference import descriptor_schema

    fields = dict(_props(descriptor_schema(kind)))
    assert fields
    for path, sub in fields.items():
        assert len(sub.get("description") or "") > 3, f"{kind} {path} has no description"
    if kind == "pipeline":
        for stage in ("curate", "train", "evaluate"):
            assert {f"stages.{f}" for f in stage_fields(stage)} <= set(fields), stage
        assert "stages.keep.minScore" in fields and "stages.baseModel" in fields


def _stage(i: int, kind: str, state: str, job: str | None, output=None) -> dict:
    return {"index": i, "name": kind, "kind": kind, "state": state, "job": job,
            "jobConfigHash": None, "earlierJobs": [], "output": output, "configHash": "h",
            "settings": {}, "descriptor": {"kind": kind, "name": kind}, "failureReason": None}  # fmt: skip


def test_a_failed_stage_ends_the_pipeline_with_its_sentence(tmp_path) -> None:
    """The pipeline's pass over its stages (``advance``): a finished stage keeps its
    output, a running one leaves the pipeline running, a failed one ends it with that
    stage's sentence, and the next stage never starts."""
    from akka_optimize.core.pipelines.records import advance
    from akka_optimize.db import Database
    from akka_optimize.db.migrate import upgrade
    from akka_optimize.db.models.jobs import Pipeline, Run

    url = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(url)
    db = Database(url)

    def run(rid: str, state: str, reason: str | None = None) -> Run:
        return Run(id=rid, project="demo", method="sft", state=state, plan={}, resolved={},
                   config_hash="h", base_model="m", dataset="d", model_name="n",
                   device_kind="cpu", failure_reason=reason, results={})  # fmt: skip

    try:
        with db.session() as s:
            s.add(run("r1", "RUNNING"))
            stages = [_stage(0, "curate", "SUCCEEDED", "c1", "demo/c:v1@sha256:" + "0" * 64),
                      _stage(1, "train", "QUEUED", "r1"), _stage(2, "evaluate", "PENDING", None)]  # fmt: skip
            s.add(Pipeline(id="p1", project="demo", state="RUNNING", descriptor={},
                           stages=stages, config_hash="h"))  # fmt: skip
        with db.session() as s:
            p = s.get(Pipeline, "p1")
            advance(None, s, p)
            assert p.state == "RUNNING" and [x["state"] for x in p.stages][1] == "RUNNING"
            s.get(Run, "r1").state = "FAILED"
            s.get(Run, "r1").failure_reason = "The loss was NaN at update 3."
        with db.session() as s:
            p = s.get(Pipeline, "p1")
            advance(None, s, p)
            assert p.state == "FAILED" and p.finished_at is not None
            assert p.failure_reason == (
                "Stage train (train) ended FAILED: The loss was NaN at update 3."
            )
            assert [x["state"] for x in p.stages] == ["SUCCEEDED", "FAILED", "PENDING"]
            assert p.stages[2]["job"] is None
    finally:
        db.dispose()
