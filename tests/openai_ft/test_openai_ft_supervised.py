"""OpenAI's documented supervised flow with the unmodified openai SDK against a live service
on the tiny model (issue 51): upload, create, poll, events, checkpoints, chat with the
``fine_tuned_model`` and with a checkpoint; the job is a run with its plan."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai_kit import TINY, finished, live_service, poll, setup, sft_rows

from helpers import LiveService


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    yield from live_service(tmp_path_factory.mktemp("openai"))


def test_a_supervised_job_trains_registers_and_answers_as_its_fine_tuned_model(svc) -> None:
    oai = setup(svc)
    f = oai.files.create(file=("capitals.jsonl", sft_rows()), purpose="fine-tune")
    assert (f.object, f.purpose, f.status, f.filename) == (
        "file",
        "fine-tune",
        "processed",
        "capitals.jsonl",
    )
    assert f.id == "file-demo-v1" and "demo/openai-files:v1" in f.status_details
    assert oai.files.content(f.id).content == sft_rows()
    assert [x.id for x in oai.files.list()] == [f.id]

    job = oai.fine_tuning.jobs.create(
        model=TINY, training_file=f.id, validation_file=f.id, suffix="capitals", seed=7,
        metadata={"team": "geo"},
        method={"type": "supervised", "supervised": {"hyperparameters": {
            "n_epochs": 2, "batch_size": 2, "learning_rate_multiplier": "auto"}}},
    )  # fmt: skip
    assert job.status in ("queued", "validating_files", "running") and job.seed == 7
    hp = job.method.supervised.hyperparameters
    assert (hp.n_epochs, hp.batch_size, hp.learning_rate_multiplier) == (2, 2, 1.0)  # auto resolved
    run_id = job.id.removeprefix("ftjob-")
    plan = svc.api("GET", f"/v1/training/runs/{run_id}", params={"settings": "true"}).json()
    assert plan["settings"]["config"]["hyperparams"]["training"]["epochs"] == 2
    assert plan["dataset"].startswith("demo/openai-files:v1@sha256:")

    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "succeeded", job
    assert job.fine_tuned_model == f"ft:{TINY}:capitals:{run_id}"
    assert job.trained_tokens and job.finished_at >= job.created_at
    assert [j.id for j in oai.fine_tuning.jobs.list(metadata={"team": "geo"})] == [job.id]
    assert list(oai.fine_tuning.jobs.list(metadata={"team": "other"})) == []

    events = list(oai.fine_tuning.jobs.list_events(job.id, limit=100))
    assert events[0].message == "The job has successfully completed"
    assert events[-1].message == f"Created fine-tuning job: {job.id}"
    metrics = [e.data for e in events if e.type == "metrics" and "train_loss" in e.data]
    assert sorted(m["step"] for m in metrics) == [1, 2, 3, 4]  # 4 rows / batch 2 × 2 epochs
    assert all(m["train_loss"] > 0 for m in metrics)
    valid = [e.data for e in events if e.type == "metrics" and "valid_loss" in e.data]
    assert sorted(m["step"] for m in valid) == [0, 2, 4]  # before training, after each epoch
    page = oai.fine_tuning.jobs.list_events(job.id, limit=2)  # OpenAI's cursor pages
    nxt = oai.fine_tuning.jobs.list_events(job.id, limit=2, after=page.data[-1].id)
    assert [e.id for e in page.data + nxt.data] == [e.id for e in events[:4]]

    (ckpt,) = list(oai.fine_tuning.jobs.checkpoints.list(job.id))
    assert ckpt.step_number == 4 and ckpt.metrics.train_loss == metrics[0]["train_loss"]
    assert ckpt.metrics.valid_loss == ckpt.metrics.full_valid_loss == valid[0]["valid_loss"]
    assert ckpt.fine_tuned_model_checkpoint == f"{job.fine_tuned_model}:ckpt-step-4"

    # the fine-tuned model answers; a first request starts its endpoint (503 + Retry-After)
    first = svc.api("POST", "/v1/chat/completions", json={
        "model": job.fine_tuned_model, "messages": [{"role": "user", "content": "Capital of France?"}]})  # fmt: skip
    assert first.status_code == 503 and first.headers["Retry-After"] == "2"
    assert first.json()["error"]["code"] == "model_loading"
    ask = {
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    out = oai.chat.completions.create(model=job.fine_tuned_model, **ask)
    assert out.choices[0].message.content is not None and out.model.startswith("demo/ft-capitals-")
    again = oai.chat.completions.create(model=ckpt.fine_tuned_model_checkpoint, **ask)
    assert again.choices[0].message.content == out.choices[0].message.content  # the same adapter
    run = svc.api("GET", f"/v1/training/runs/{run_id}").json()
    assert run["results"]["model"].startswith(out.model.split(":")[0])


def test_refusals_name_the_field_in_openais_shape(svc) -> None:
    oai = setup(svc, "ref")
    f = oai.files.create(file=("c.jsonl", sft_rows()), purpose="fine-tune")
    cases = [
        ({"model": "gpt-4o-mini"}, "model", "gpt-4o-mini"),
        ({"method": {"type": "supervised", "supervised": {"hyperparameters": {"beta": 0.1}}}},
         "method.supervised.hyperparameters.beta", "not a hyperparameter of supervised"),
        ({"hyperparameters": {"n_epochs": 0}}, "hyperparameters.n_epochs", "from 1 to 50"),
        ({"integrations": [{"type": "wandb", "wandb": {"project": "x"}}]}, "integrations", "wandb"),
        ({"training_file": "file-ref-v99"}, "training_file", "No such File"),
        ({"suffix": "Not OK!"}, "suffix", "suffix"),
        ({"method": {"type": "reinforcement", "reinforcement": {"grader": {
            "type": "string_check", "name": "s", "input": "x", "reference": "y", "operation": "eq"},
            "hyperparameters": {"compute_multiplier": 2}}}}, "method.reinforcement.hyperparameters.compute_multiplier", "auto"),
    ]  # fmt: skip
    for extra, param, words in cases:
        body = {"model": TINY, "training_file": f.id, **extra}
        with pytest.raises(
            openai.BadRequestError if param != "training_file" else openai.NotFoundError
        ) as e:
            oai.fine_tuning.jobs.create(**body)
        err = e.value.body
        assert err["param"] == param and words in err["message"], err
        assert err["type"] == "invalid_request_error" and err["code"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.files.create(
            file=("bad.jsonl", b'{"messages": [{"role": "user", "content": "x"}]}\n{'),
            purpose="fine-tune",
        )
    assert "Line 2" in e.value.body["message"] and e.value.body["param"] == "file"
    with pytest.raises(openai.BadRequestError) as e:
        oai.files.create(file=("c.jsonl", sft_rows()), purpose="assistants")
    assert e.value.body["param"] == "purpose"
    # an admin token names its project with OpenAI-Project (the SDK's project=)
    admin = openai.OpenAI(base_url=svc.url + "/v1", api_key=svc.token, max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        admin.files.create(file=("c.jsonl", sft_rows()), purpose="fine-tune")
    assert e.value.body["param"] == "project" and "OpenAI-Project" in e.value.body["message"]
    scoped = openai.OpenAI(base_url=svc.url + "/v1", api_key=svc.token, project="ref")
    assert [x.id for x in scoped.files.list()] == [f.id]
    # another project's token sees none of ref's files or jobs
    other = setup(svc, "other")
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(f.id)
    assert list(other.files.list()) == [] and list(other.fine_tuning.jobs.list()) == []
