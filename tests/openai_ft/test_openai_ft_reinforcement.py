"""Reinforcement jobs through the unmodified openai SDK (issue 51 items 2-3): a python
grader runs as the run's reward in the grader sandbox (each sample's reward is what the
grader gives its completion), and a score_model grader on a registered model is the
platform's judge."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai_kit import TINY, finished, live_service, poll, rl_rows, setup

from akka_optimize.core.openai_ft.grading import grade
from helpers import LiveService

PYTHON = {
    "type": "python",
    "name": "has_vowels",
    "source": "def grade(sample, item):\n"
    "    text = sample['output_text']\n"
    "    return sum(c in 'aeiou' for c in text) / max(len(text), 1) + (item['answer'] in text)\n",
}


def _python(source: str, sample: dict, item: dict) -> float:
    """The test's own python grader, run here to check the sandbox's rewards."""
    scope: dict = {}
    exec(source, scope)  # noqa: S102 - this test's own constant source
    return scope["grade"](sample, item)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    yield from live_service(tmp_path_factory.mktemp("openai"))


@pytest.fixture(scope="module")
def oai(svc: LiveService) -> openai.OpenAI:
    return setup(svc)


def _rl(oai: openai.OpenAI, grader: dict):
    f = oai.files.create(file=("prompts.jsonl", rl_rows()), purpose="fine-tune")
    assert "reinforcement rows" in f.status_details
    return oai.fine_tuning.jobs.create(
        model=TINY, training_file=f.id, suffix="rl",
        method={"type": "reinforcement", "reinforcement": {"grader": grader, "hyperparameters": {
            "n_epochs": 1, "batch_size": 2, "eval_interval": "auto"}}},
    )  # fmt: skip


def test_a_python_grader_is_the_runs_reward(svc, oai) -> None:
    job = _rl(oai, PYTHON)
    hp = job.method.reinforcement.hyperparameters
    assert (hp.n_epochs, hp.batch_size, hp.learning_rate_multiplier) == (1, 2, 1.0)
    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "succeeded", job
    run_id = job.id.removeprefix("ftjob-")
    run = svc.api("GET", f"/v1/training/runs/{run_id}").json()
    assert run["method"] == "rl" and run["reward"].startswith("bundle:demo/openai-grader:v1")
    metrics = [
        e.data for e in oai.fine_tuning.jobs.list_events(job.id, limit=100) if e.type == "metrics"
    ]
    assert sorted(m["step"] for m in metrics) == [1, 2]  # 4 prompts, 2 per update, 1 epoch
    assert all(m["reward_errors"] == 0 and "train_reward_mean" in m for m in metrics)
    samples = svc.api("GET", f"/v1/training/runs/{run_id}/samples", params={"step": 1}).json()
    (update,) = samples["updates"]
    answers = dict(zip(["Capital of France?", "Capital of Italy?", "Capital of Spain?",
                        "Capital of Peru?"], ["Paris", "Rome", "Madrid", "Lima"], strict=True))  # fmt: skip
    for s in update["samples"]:  # the reward is what the grader gives the shown completion
        item = {"answer": next(a for q, a in answers.items() if q in s["prompt"])}
        assert s["reward"] == pytest.approx(grade(PYTHON, s["completion"], item, _python)["reward"])


def test_a_score_model_grader_scores_with_the_platforms_judge(svc, oai) -> None:
    judge = {"type": "score_model", "name": "judge", "model": TINY, "range": [0, 1],
             "input": [{"role": "user", "content": "Score {{sample.output_text}}"}]}  # fmt: skip
    job = _rl(oai, judge)
    job = poll(lambda: oai.fine_tuning.jobs.retrieve(job.id), finished)
    assert job.status == "succeeded", job
    run = svc.api("GET", f"/v1/training/runs/{job.id.removeprefix('ftjob-')}").json()
    assert run["reward"].startswith(f"model:{TINY}") and run["judgeEndpoint"]
    events = list(oai.fine_tuning.jobs.list_events(job.id, limit=100))
    assert any(e.level == "warn" and "input messages are not sent" in e.message for e in events)
    with pytest.raises(openai.BadRequestError) as e:
        _rl(oai, {"type": "label_model", "name": "l", "model": TINY, "labels": ["a"],
                  "passing_labels": ["a"], "input": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert e.value.body["param"] == "method.reinforcement.grader"


def test_an_openai_grader_file_grades_an_evaluation(svc, oai, tmp_path) -> None:
    """``training evaluations start --grader openai:FILE.json``: the grader reads each row's
    reference fields as ``item`` (only the Paris row's answer equals "Paris": mean 1/4)."""
    f = oai.files.create(file=("prompts.jsonl", rl_rows()), purpose="fine-tune")
    g = tmp_path / "grader.json"
    g.write_text(json.dumps({"type": "string_check", "name": "paris", "input": "{{item.answer}}",
                             "reference": "Paris", "operation": "eq"}))  # fmt: skip
    out = svc.cli("training", "evaluations", "start", "--model", TINY, "--project", "demo",
                  "--dataset", f"demo/openai-files:{f.id.rsplit('-', 1)[1]}", "--grader",
                  f"openai:{g}", "--max-tokens", "2", "--wait", "-o", "json", check=True)  # fmt: skip
    ev = json.loads(out.stdout[out.stdout.index("{") :])
    assert ev["grader"].startswith("bundle:demo/openai-grader:v") and "#reward" in ev["grader"]
    assert ev["results"]["mean"] == 0.25 and ev["results"]["errors"] == 0
    g.write_text(json.dumps({"type": "string_check", "name": "x", "input": "a", "operation": "eq"}))
    bad = svc.cli("training", "evaluations", "start", "--model", TINY, "--project", "demo",
                  "--dataset", "demo/openai-files:v1", "--grader", f"openai:{g}")  # fmt: skip
    assert bad.returncode == 1 and "grader.reference" in bad.stderr
