"""OpenAI's documented DPO flow with the unmodified openai SDK against a live service on the
tiny model (issue 51): upload pairs, create a ``dpo`` job with ``beta``, poll, events with
OpenAI's metric names plus the pair rewards, checkpoints, chat with the
``fine_tuned_model``; the job is a preference run (``config.method: dpo``) with its plan."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types.fine_tuning import FineTuningJob, FineTuningJobEvent
from openai.types.fine_tuning.jobs import FineTuningJobCheckpoint
from openai_kit import TINY, dpo_rows, finished, live_service, poll, setup, sft_rows

from helpers import LiveService

REWARDS = ("rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy")


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    yield from live_service(tmp_path_factory.mktemp("openai-dpo"))


def test_a_dpo_job_trains_on_pairs_registers_and_answers(svc) -> None:
    oai = setup(svc)
    f = oai.files.create(file=("pairs.jsonl", dpo_rows()), purpose="fine-tune")
    assert f.status_details == "dpo rows, registered as demo/openai-files:v1"
    assert oai.files.content(f.id).content == dpo_rows()

    job = oai.fine_tuning.jobs.create(
        model=TINY, training_file=f.id, validation_file=f.id, suffix="pairs", seed=3,
        method={"type": "dpo", "dpo": {"hyperparameters": {
            "n_epochs": 2, "batch_size": 2, "learning_rate_multiplier": 4, "beta": 0.2}}},
    )  # fmt: skip
    hp = job.method.dpo.hyperparameters
    assert (hp.n_epochs, hp.batch_size, hp.learning_rate_multiplier, hp.beta) == (2, 2, 4.0, 0.2)
    run_id = job.id.removeprefix("ftjob-")
    run = svc.api("GET", f"/v1/training/runs/{run_id}", params={"settings": "true"}).json()
    cfg = run["settings"]["config"]
    assert cfg["method"] == "dpo" and cfg["dataset"].startswith("demo/openai-files:v1@sha256:")
    dpo = cfg["dpoHyperparams"]
    assert (dpo["beta"], dpo["epochs"], dpo["microBatchPerGpu"], dpo["seed"]) == (0.2, 2, 2, 3)
    assert dpo["lossTypes"] == ["sigmoid"] and dpo["gradientAccumulation"] == 1
    assert dpo["optimizer"]["learningRate"] == pytest.approx(4 * 5e-5)  # 4 × the DPO default

    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "succeeded", job
    assert job.fine_tuned_model == f"ft:{TINY}:pairs:{run_id}"
    assert job.method.type == "dpo" and job.method.dpo.hyperparameters.beta == 0.2

    events = list(oai.fine_tuning.jobs.list_events(job.id, limit=100))
    assert events[0].message == "The job has successfully completed"
    train = [e.data for e in events if e.type == "metrics" and "train_loss" in e.data]
    assert sorted(m["step"] for m in train) == [1, 2, 3, 4]  # 4 pairs / batch 2 × 2 epochs
    assert all(m["train_loss"] > 0 and set(REWARDS) <= {k[6:] for k in m} for m in train)
    assert all(0 <= m["train_rewards_accuracy"] <= 1 for m in train)
    assert all(
        m["train_rewards_margin"]
        == pytest.approx(m["train_rewards_chosen"] - m["train_rewards_rejected"], abs=1e-5)
        for m in train
    )
    valid = [e.data for e in events if e.type == "metrics" and "valid_loss" in e.data]
    assert [m["step"] for m in valid] == [4]  # validationFrequencySteps 0: after the last
    assert 0 <= valid[0]["valid_rewards_accuracy"] <= 1 and "valid_rewards_margin" in valid[0]

    (ckpt,) = list(oai.fine_tuning.jobs.checkpoints.list(job.id))
    assert ckpt.step_number == 4 and ckpt.metrics.full_valid_loss == valid[0]["valid_loss"]
    assert ckpt.fine_tuned_model_checkpoint == f"{job.fine_tuned_model}:ckpt-step-4"

    # the SDK's own pydantic models accept every object of the job, strictly
    raw = oai.with_raw_response.fine_tuning.jobs
    FineTuningJob.model_validate(raw.retrieve(job.id).http_response.json())
    for e in raw.list_events(job.id, limit=100).http_response.json()["data"]:
        FineTuningJobEvent.model_validate(e)
    for c in raw.checkpoints.list(job.id).http_response.json()["data"]:
        FineTuningJobCheckpoint.model_validate(c)

    out = oai.chat.completions.create(
        model=job.fine_tuned_model,
        messages=[{"role": "user", "content": "Capital of France?"}],
        max_tokens=8,
        temperature=0,
    )
    assert out.choices[0].message.content is not None and out.model.startswith("demo/ft-pairs-")
    model = svc.api("GET", f"/v1/training/runs/{run_id}").json()["results"]["model"]
    assert model.startswith(out.model.split(":")[0])


def test_dpo_refusals_name_the_field(svc) -> None:
    oai = setup(svc, "dporef")
    pairs = oai.files.create(file=("p.jsonl", dpo_rows()), purpose="fine-tune")
    chats = oai.files.create(file=("c.jsonl", sft_rows()), purpose="fine-tune")
    dpo = {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0}}}
    cases = [
        ({"training_file": pairs.id, "method": dpo}, "method.dpo.hyperparameters.beta", "above 0"),
        ({"training_file": chats.id, "method": {"type": "dpo"}}, "training_file", "dpo rows"),
        ({"training_file": pairs.id}, "training_file", "supervised rows"),  # legacy = supervised
        ({"training_file": pairs.id, "method": {"type": "dpo", "dpo": {"grader": {}}}},
         "method.dpo.grader", "not a field"),
        ({"training_file": pairs.id, "method": {"type": "dpo", "dpo": {"hyperparameters": {
            "eval_interval": 2}}}}, "method.dpo.hyperparameters.eval_interval", "not a hyperparameter"),
    ]  # fmt: skip
    for extra, param, words in cases:
        with pytest.raises(openai.BadRequestError) as e:
            oai.fine_tuning.jobs.create(model=TINY, **extra)
        err = e.value.body
        assert err["param"] == param and words in err["message"], err
