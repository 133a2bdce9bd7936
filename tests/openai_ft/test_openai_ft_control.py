"""Cancel, pause and resume through the unmodified openai SDK (issue 51 item 2), the
graders' run and validate routes as OpenAI documents them (item 3), and every object the
service answers validated by the SDK's own pydantic models (the OpenAPI shapes)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types import FileDeleted, FileObject
from openai.types.fine_tuning import FineTuningJob, FineTuningJobEvent
from openai.types.fine_tuning.alpha import GraderRunResponse, GraderValidateResponse
from openai.types.fine_tuning.jobs import FineTuningJobCheckpoint
from openai_kit import TINY, finished, live_service, poll, setup, sft_rows

from helpers import LiveService, hold_at, release, wait_held

PYTHON = "def grade(sample, item):\n    return float(item['answer'] in sample['output_text'])\n"
SLOW = "def grade(sample, item):\n    while True:\n        pass\n"


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    yield from live_service(tmp_path_factory.mktemp("openai"))


@pytest.fixture(scope="module")
def oai(svc: LiveService) -> openai.OpenAI:
    return setup(svc)


def _job(oai: openai.OpenAI, epochs: int = 2):
    f = oai.files.create(file=("c.jsonl", sft_rows()), purpose="fine-tune")
    hp = {"n_epochs": epochs, "batch_size": 1}
    return oai.fine_tuning.jobs.create(
        model=TINY,
        training_file=f.id,
        method={"type": "supervised", "supervised": {"hyperparameters": hp}},
    )


def test_pause_and_resume_continue_the_same_run(svc, oai) -> None:
    hold_at(svc, "step-2")
    job = _job(oai)
    wait_held(svc)
    paused = oai.fine_tuning.jobs.pause(job.id)
    assert paused.id == job.id
    release(svc)
    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), lambda j: j.status == "paused")
    assert oai.fine_tuning.jobs.pause(job.id).status == "paused"  # pausing again: as it is
    with pytest.raises(openai.NotFoundError):
        oai.fine_tuning.jobs.retrieve("ftjob-nope")
    resumed = oai.fine_tuning.jobs.resume(job.id)
    assert resumed.status == "queued"
    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "succeeded" and job.fine_tuned_model
    steps = [
        e.data["step"]
        for e in oai.fine_tuning.jobs.list_events(job.id, limit=100)
        if e.type == "metrics"
    ]
    assert sorted(set(steps)) == list(range(1, 9))  # 4 rows × 2 epochs, batch 1
    with pytest.raises(openai.BadRequestError) as e:
        oai.fine_tuning.jobs.resume(job.id)
    assert e.value.body["param"] == "fine_tuning_job_id" and "SUCCEEDED" in e.value.body["message"]


def test_cancel_ends_a_running_job_without_a_model(svc, oai) -> None:
    hold_at(svc, "step-1")
    job = _job(oai, epochs=3)
    wait_held(svc)
    oai.fine_tuning.jobs.cancel(job.id)
    release(svc)
    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "cancelled" and job.fine_tuned_model is None
    assert next(iter(oai.fine_tuning.jobs.list_events(job.id))).message == "The job was cancelled"
    with pytest.raises(openai.BadRequestError):
        oai.fine_tuning.jobs.cancel(job.id)


def test_graders_run_and_validate_as_openai_documents(oai) -> None:
    sc = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
          "reference": "{{item.answer}}", "operation": "eq"}  # fmt: skip
    assert oai.fine_tuning.alpha.graders.validate(grader=sc).grader.name == "sc"
    multi = {"type": "multi", "name": "m", "calculate_output": "0.5 * sc + 0.5 * py",
             "graders": {"sc": sc, "py": {"type": "python", "name": "py", "source": PYTHON}}}  # fmt: skip
    out = oai.fine_tuning.alpha.graders.run(
        grader=multi, model_sample="Paris", item={"answer": "Paris"}
    )
    assert out.reward == 1.0 and out.sub_rewards == {"sc": 1.0, "py": 1.0}
    out = oai.fine_tuning.alpha.graders.run(
        grader=multi, model_sample="Rome", item={"answer": "Paris"}
    )
    assert out.reward == 0.0 and not any(
        v is True for v in out.metadata.errors.model_dump().values()
    )
    boom = {"type": "python", "name": "p", "source": "def grade(sample, item):\n    return 1 / 0\n"}
    out = oai.fine_tuning.alpha.graders.run(grader=boom, model_sample="x", item={})
    assert out.metadata.errors.python_grader_runtime_error is True and out.reward == 0.0
    assert "ZeroDivisionError" in out.metadata.errors.python_grader_runtime_error_details
    slow = oai.fine_tuning.alpha.graders.run(grader={**boom, "source": SLOW}, model_sample="x")
    assert slow.metadata.errors.python_grader_server_error is True
    assert "limit" in slow.metadata.errors.python_grader_server_error_type
    bad = {**multi, "calculate_output": "sc + __import__('os').getpid()"}
    with pytest.raises(openai.BadRequestError) as e:
        oai.fine_tuning.alpha.graders.validate(grader=bad)
    assert e.value.body["param"] == "grader.calculate_output"
    with pytest.raises(openai.BadRequestError) as e:
        oai.fine_tuning.alpha.graders.run(grader={**sc, "operation": "glob"}, model_sample="x")
    assert e.value.body["param"] == "grader.operation"


def test_every_object_validates_against_the_sdks_models(svc, oai) -> None:
    """The raw JSON of each route, validated by the SDK's own pydantic models (strictly:
    ``model_validate``, not the SDK's lenient construction)."""
    raw = oai.with_raw_response
    f = raw.files.create(file=("c.jsonl", sft_rows()), purpose="fine-tune").http_response.json()
    FileObject.model_validate(f)
    FileObject.model_validate(raw.files.retrieve(f["id"]).http_response.json())
    for item in raw.files.list().http_response.json()["data"]:
        FileObject.model_validate(item)
    jobs = raw.fine_tuning.jobs.list().http_response.json()["data"]
    done = [j for j in jobs if j["status"] == "succeeded"]
    assert done, jobs
    for j in jobs:
        if j["status"] != "paused":  # the SDK's status literal lacks OpenAI's paused
            FineTuningJob.model_validate(j)
    jid = done[0]["id"]
    for e in raw.fine_tuning.jobs.list_events(jid).http_response.json()["data"]:
        FineTuningJobEvent.model_validate(e)
    for c in raw.fine_tuning.jobs.checkpoints.list(jid).http_response.json()["data"]:
        FineTuningJobCheckpoint.model_validate(c)
    sc = {"type": "string_check", "name": "sc", "input": "a", "reference": "a", "operation": "eq"}
    GraderRunResponse.model_validate(
        raw.fine_tuning.alpha.graders.run(grader=sc, model_sample="a").http_response.json()
    )
    GraderValidateResponse.model_validate(
        raw.fine_tuning.alpha.graders.validate(grader=sc).http_response.json()
    )
    FileDeleted.model_validate(raw.files.delete(f["id"]).http_response.json())
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(f["id"])
