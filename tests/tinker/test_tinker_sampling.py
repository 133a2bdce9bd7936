"""``ServiceClient.create_sampling_client(model_path=… | base_model=…)`` through the official
``tinker==0.38.0`` SDK, unmodified, against a live service on the tiny model (issue 21).

A training client learns a continuation until its greedy answer changes and saves sampler
weights; then (each client in its own session, since on the CI's one CPU device a client
holds the device until its session ends) a sampling client of the saved path answers as
the trained weights did, and a base-model client answers as the base model does, checked
against transformers in-process. Unknown paths, another project's path and an unselected
base model are refused with a sentence naming the field. Last, the RestClient lists that
training run (not the sampling clients' runs) and its checkpoints with the SDK's types,
deletes one, and refuses publishing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tinker_kit import TINY, answer_datum, created, tinker_service

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

PROMPT = "Question: what is two plus two? Answer:"
TARGET = " zebra zebra zebra zebra zebra zebra"
GREEDY = types.SamplingParams(max_tokens=6, temperature=0.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tinker-sampling")
    with tinker_service(tmp) as (svc, keys):
        yield {"svc": svc, "keys": keys}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _fails(call: Any, *words: str) -> str:
    with pytest.raises(tinker.TinkerError) as info:
        call()
    text = str(info.value)
    for w in words:
        assert w in text, text
    return text


def _get(world: Any, route: str) -> Any:
    r = httpx.get(world["svc"].url + route, headers={"X-API-Key": world["keys"]["demo"]})
    assert r.status_code == 200, r.text
    return r.json()


def _client(world: Any, project: str = "demo") -> Any:
    return tinker.ServiceClient(base_url=world["svc"].url, api_key=world["keys"][project])


def _greedy(sampler: Any, prompt: list[int]) -> Any:
    return sampler.sample(types.ModelInput.from_ints(prompt), 1, GREEDY).result().sequences[0]


def test_a_trained_client_changes_its_greedy_answer_and_saves(world: Any, tokenizer: Any) -> None:
    client = _client(world)
    trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=3))
    prompt = tokenizer.encode(PROMPT)
    before = _greedy(created(trainer.save_weights_and_get_sampling_client()), prompt)
    datum = answer_datum(prompt, tokenizer.encode(TARGET))
    for _ in range(8):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    after = _greedy(created(trainer.save_weights_and_get_sampling_client()), prompt)
    assert after.tokens != before.tokens, (before.tokens, after.tokens)
    path = trainer.save_weights_for_sampler("zebra").result().path
    assert path == f"tinker://{trainer.model_id}/sampler_weights/zebra"
    bad = lambda: trainer.save_state("bad", ttl_seconds=5).result()  # noqa: E731
    _fails(bad, "ttl_seconds", "3600")  # refused in seq_id order: the next save goes on
    state = trainer.save_state("s1").result().path
    kept = trainer.save_state("kept", ttl_seconds=7200).result().path
    client.close("success").result()  # frees the device for the sampling clients
    world.update(prompt=prompt, before=before, after=after, path=path, state=state, kept=kept)


def test_a_saved_path_samples_as_the_trained_weights(world: Any) -> None:
    client = _client(world)
    sampler = client.create_sampling_client(model_path=world["path"]).result()
    got = _greedy(sampler, world["prompt"])
    assert got.tokens == world["after"].tokens
    assert (
        max(abs(a - b) for a, b in zip(got.logprobs, world["after"].logprobs, strict=True)) < 1e-5
    )
    info = _get(world, f"/api/v1/samplers/{sampler._sampling_session_id}")
    assert info == {
        "sampler_id": sampler._sampling_session_id,
        "base_model": TINY,
        "model_path": world["path"],
    }
    missing = world["path"].replace("/zebra", "/nothing")
    _fails(lambda: client.create_sampling_client(model_path=missing).result(), "model_path")
    state = world["path"].replace("sampler_weights", "weights")
    _fails(lambda: client.create_sampling_client(model_path=state).result(), "model_path")
    other = _client(world, "other")  # another project's key cannot reach the checkpoint
    _fails(lambda: other.create_sampling_client(model_path=world["path"]).result(), "model_path")
    unselected = "HuggingFaceTB/SmolLM2-135M-Instruct"
    _fails(
        lambda: client.create_sampling_client(base_model=unselected).result(),
        "base_model",
        "not selected",
    )
    client.close("success").result()


def test_a_base_model_client_samples_the_base_model(world: Any, tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    client = _client(world)
    sampler = client.create_sampling_client(base_model=TINY).result()
    got = _greedy(sampler, world["prompt"])
    assert got.tokens == world["before"].tokens != world["after"].tokens
    ids = world["prompt"] + got.tokens
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result()
    client.close("success").result()

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    want = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert scored[0] is None and len(scored) == len(ids)
    assert max(abs(a - b) for a, b in zip(scored[1:], want.tolist(), strict=True)) < 1e-4
    n = len(world["prompt"])
    tail = want.tolist()[n - 1 :]
    assert max(abs(a - b) for a, b in zip(got.logprobs, tail, strict=True)) < 1e-4
    greedy = logits[n - 1 :].argmax(-1).tolist()  # each sampled token is the argmax
    assert got.tokens == greedy[: len(got.tokens)]
    assert all(math.isfinite(x) for x in got.logprobs)


def test_the_rest_client_lists_and_deletes_checkpoints(world: Any) -> None:
    svc = world["svc"]
    client = _client(world)
    rest = client.create_rest_client()
    run_id = world["path"].removeprefix("tinker://").split("/")[0]
    runs = rest.list_training_runs().result()  # parsed with the SDK's TrainingRunsResponse
    assert [r.training_run_id for r in runs.training_runs] == [run_id]  # no sampling clients
    assert runs.cursor.total_count == 1 and runs.cursor.limit == 20
    run = rest.get_training_run_by_tinker_path(world["path"]).result()
    assert (run.base_model, run.model_owner, run.lora_rank, run.is_lora) == (TINY, "demo", 4, True)
    assert run.last_sampler_checkpoint.tinker_path == world["path"]
    assert run.last_checkpoint.tinker_path == world["kept"]
    listed = rest.list_checkpoints(run_id).result().checkpoints
    assert {(c.checkpoint_type, c.tinker_path) for c in listed} == {
        ("sampler", world["path"]),
        ("training", world["state"]),
        ("training", world["kept"]),
    }
    assert all(c.size_bytes and c.size_bytes > 1000 for c in listed)
    expiry = {c.tinker_path: c.expires_at for c in listed}
    assert expiry[world["state"]] is None and expiry[world["path"]] is None
    left = (expiry[world["kept"]] - datetime.now(UTC)).total_seconds()
    assert 7000 < left <= 7200, left
    assert len(rest.list_user_checkpoints().result().checkpoints) == 3

    rest.set_checkpoint_ttl_from_tinker_path(world["state"], 3600).result()
    listed = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result().checkpoints}
    assert 3500 < (listed[world["state"]].expires_at - datetime.now(UTC)).total_seconds() <= 3600
    rest.set_checkpoint_ttl_from_tinker_path(world["kept"], None).result()
    listed = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result().checkpoints}
    assert listed[world["kept"]].expires_at is None
    _fails(
        lambda: rest.set_checkpoint_ttl_from_tinker_path(world["state"], 10).result(), "ttl_seconds"
    )

    other = tinker.RestClient(base_url=svc.url, api_key=world["keys"]["other"])  # sees nothing
    assert other.list_training_runs().result().training_runs == []
    _fails(lambda: other.get_training_run(run_id).result(), "training_run_id")
    _fails(
        lambda: other.delete_checkpoint_from_tinker_path(world["path"]).result(), "training_run_id"
    )
    _fails(lambda: rest.list_training_runs(limit=0).result(), "limit")
    _fails(lambda: rest.publish_checkpoint_from_tinker_path(world["path"]).result(), "publish")

    runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
    views = [svc.api("GET", f"/v1/training/runs/{r['id']}").json() for r in runs]
    pinned = next(v["results"] for v in views if v["results"].get("model"))
    rest.delete_checkpoint_from_tinker_path(world["path"]).result()
    left = rest.list_checkpoints(run_id).result().checkpoints
    assert sorted(c.tinker_path for c in left) == sorted([world["state"], world["kept"]])
    assert rest.get_training_run(run_id).result().last_sampler_checkpoint is None
    _fails(lambda: client.create_sampling_client(model_path=world["path"]).result(), "model_path")
    _fails(lambda: rest.delete_checkpoint_from_tinker_path(world["path"]).result(), "checkpoint_id")
    ref, digest = pinned["model"].split("@", 1)  # demo/NAME:vN@sha256:…: the version stays
    name, version = ref.split(":")
    got = svc.api("GET", f"/v1/registry/models/{name}/versions").json()["items"]
    assert [(v["version"], v["digest"]) for v in got] == [(version, digest)]
    client.close("success").result()
