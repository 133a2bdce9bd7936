"""The official ``tinker==0.38.0`` SDK, unmodified, against a live service on the tiny model
(issue 21): a supervised loop whose loss falls, the engine's numbers in-process, and bad
inputs that raise the SDK's error with a sentence naming the field while the run goes on.

One service and one training client per module (the client's worker loads the model once,
and on the CI's one CPU device a second client would queue behind it): the tests run in
file order on that client, the first one on its fresh weights.
"""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tinker_kit import TINY, created, tinker_service

from helpers import BIN, LiveService, base_env
from jobs.jobs_helpers import wait_state

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Question: what is two plus two? Answer: four.",
    "Paris is the capital of France and Rome is the capital of Italy.",
    "A tiny model learns a few sentences by heart.",
]


def _tinker_runs(svc: LiveService) -> list[dict[str, Any]]:
    runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
    return [r for r in runs if r["method"] == "tinker"]


def _tinker_run(svc: LiveService) -> dict[str, Any]:
    return _tinker_runs(svc)[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tinker")
    with tinker_service(tmp) as (svc, keys):
        client = tinker.ServiceClient(base_url=svc.url, api_key=keys["demo"])
        caps = tinker.RestClient(base_url=svc.url, api_key=keys["demo"])
        models = caps.get_server_capabilities().result().supported_models
        trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=3))
        yield {"svc": svc, "keys": keys, "client": client, "trainer": trainer, "models": models}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def datum(tokens: list[int], prompt: int = 0) -> types.Datum:
    """A shifted datum; the first ``prompt`` targets have weight 0 (tinker-cookbook style)."""
    n = len(tokens) - 1
    weights = [0.0] * prompt + [1.0] * (n - prompt)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


def test_keys_carry_the_tinker_prefix(world: Any) -> None:
    assert all(k.startswith("tml-") for k in world["keys"].values())
    assert [m.model_name for m in world["models"]] == [TINY]


def test_forward_backward_matches_the_engine_in_process(
    world: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.engine.session.training import TrainingSession
    from akka_optimize.tinker.datums import to_passes
    from akka_optimize.tinker.kind import ATTN, MLP, UNEMBED

    trainer = world["trainer"]  # fresh: this test runs first (one device, one client)
    batch = [datum(tokenizer.encode(t), prompt=3) for t in TEXTS[:3]]
    adam = types.AdamParams(learning_rate=1e-2, beta1=0.8, beta2=0.9, eps=1e-6)
    trainer.forward_backward(batch, "cross_entropy").result()
    trainer.optim_step(adam).result()
    remote = trainer.forward_backward(batch, "cross_entropy").result()

    cfg = EngineConfig(
        lora_rank=4, lora_alpha=32.0, seed=3, device="cpu", target_modules=ATTN + MLP + (UNEMBED,)
    )
    local = TrainingSession(tiny_model_dir, cfg)
    wire = [
        {
            "tokens": d.model_input.to_ints(),
            "inputs": {k: v.data for k, v in d.loss_fn_inputs.items()},
        }
        for d in batch
    ]
    passes, inputs = to_passes(wire, "cross_entropy", {}, local.vocab_size)
    local.forward_backward(passes, "cross_entropy", loss_inputs=inputs)
    local.optim_step_sum(**adam.model_dump())
    ref = local.forward_backward(passes, "cross_entropy", loss_inputs=inputs)
    assert math.isclose(remote.metrics["loss:sum"], ref.loss_sum, rel_tol=1e-6, abs_tol=1e-6)
    for out, lp in zip(remote.loss_fn_outputs, ref.logprobs, strict=True):
        got = out["logprobs"].data
        want = lp[1:].tolist()
        assert len(got) == len(want)
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-6


def test_supervised_loop_loss_falls_and_registers(world: Any, tokenizer: Any) -> None:
    trainer, svc = world["trainer"], world["svc"]
    batch = [datum(tokenizer.encode(t), prompt=2) for t in TEXTS]
    supervised = sum(len(d.loss_fn_inputs["weights"].data) - 2 for d in batch)
    losses = []
    for _ in range(6):  # pipelined as sl_loop.py: both submitted before either is read
        fb = trainer.forward_backward(batch, "cross_entropy")
        opt = trainer.optim_step(types.AdamParams(learning_rate=2e-2))
        out = fb.result()
        opt.result()
        losses.append(out.metrics["loss:sum"] / supervised)
        assert len(out.loss_fn_outputs) == len(batch)
    assert losses[-1] < 0.8 * losses[0], losses
    saved = trainer.save_weights_for_sampler("final").result()
    assert saved.path.startswith("tinker://") and saved.path.endswith("/sampler_weights/final")
    run = _tinker_run(svc)
    detail = svc.api("GET", f"/v1/training/runs/{run['id']}").json()
    assert detail["state"] == "RUNNING"
    assert detail["results"]["step"] == 1 + 6  # the parity test's update, then this loop's
    model = detail["results"]["model"]  # PROJECT/NAME:v1@sha256:…, the run's model version
    assert model.startswith(f"demo/{detail['modelName']}:v1")
    metrics = svc.cli("training", "runs", "metrics", run["id"], "-o", "json", check=True).stdout
    assert '"gradNorm"' in metrics


def _fails(call: Any, *words: str) -> str:
    with pytest.raises(tinker.TinkerError) as info:
        call()
    text = str(info.value)
    for w in words:
        assert w in text, text
    return text


def test_the_saved_version_is_served_through_openai(world: Any) -> None:
    import json

    import openai

    svc = world["svc"]
    model = _tinker_run(svc)["results"]["model"].split("@", 1)[0]  # demo/NAME:v1
    out = svc.cli("training", "endpoints", "create", "--model", model, "--wait", "-o", "json")
    assert out.returncode == 0, out.stderr
    ep = json.loads(out.stdout[out.stdout.index("{") :])
    client = openai.OpenAI(
        base_url=f"{svc.url}/v1/training/endpoints/{ep['id']}/openai/v1",
        api_key=svc.token,
        max_retries=0,
    )
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert reply.choices[0].message.content is not None
    svc.cli("training", "endpoints", "delete", ep["id"], check=True)


def test_tokenizer_loads_offline(world: Any, tokenizer: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = world["trainer"].get_tokenizer()
    assert tok.encode(TEXTS[1]) == tokenizer.encode(TEXTS[1])


def test_rl_loop_samples_the_saved_weights(world: Any, tokenizer: Any) -> None:
    trainer = world["trainer"]
    prompt = tokenizer.encode(TEXTS[1])
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    old = None
    for _ in range(2):  # rl_loop.py: save → sampling client → sample → advantages → update
        sampler = created(trainer.save_weights_and_get_sampling_client())
        if old is not None:  # a client of an earlier step still scores that step's weights
            again = old[0].compute_logprobs(types.ModelInput.from_ints(old[1])).result()
            assert max(abs(a - b) for a, b in zip(again[1:], old[2][1:], strict=True)) < 1e-6
            now = sampler.compute_logprobs(types.ModelInput.from_ints(old[1])).result()
            assert max(abs(a - b) for a, b in zip(now[1:], old[2][1:], strict=True)) > 1e-4
        got = sampler.sample(types.ModelInput.from_ints(prompt), 4, params).result()
        seqs = got.sequences
        assert len(seqs) == 4 and all(len(s.logprobs) == len(s.tokens) > 0 for s in seqs)
        rewards = [sum(t < 1000 for t in s.tokens) / len(s.tokens) for s in seqs]
        mean = sum(rewards) / len(rewards)
        batch = []
        for s, r in zip(seqs, rewards, strict=True):
            ids = prompt + s.tokens
            pad = [0.0] * (len(prompt) - 1)
            batch.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={
                        "target_tokens": ids[1:],
                        "logprobs": pad + list(s.logprobs),
                        "advantages": pad + [r - mean] * len(s.tokens),
                    },
                )
            )
        out = trainer.forward_backward(batch, "importance_sampling").result()
        for s, o in zip(seqs, out.loss_fn_outputs, strict=True):  # same weights: ratio 1
            trained = o["logprobs"].tolist()[len(prompt) - 1 :]
            assert max(abs(a - b) for a, b in zip(trained, s.logprobs, strict=True)) < 1e-4
        first = seqs[0]  # compute_logprobs scores a sequence with the same weights
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + first.tokens))
        scored = scored.result()
        assert scored[0] is None and len(scored) == len(prompt) + len(first.tokens)
        tail = scored[len(prompt) :]
        assert max(abs(a - b) for a, b in zip(tail, first.logprobs, strict=True)) < 1e-4
        trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        old = (sampler, prompt + first.tokens, scored)


def _step_then_forward(trainer: Any, batch: list) -> list[list[float]]:
    adam = types.AdamParams(learning_rate=1e-2, weight_decay=0.01, grad_clip_norm=1.0)
    trainer.forward_backward(batch, "cross_entropy").result()
    trainer.optim_step(adam).result()
    out = trainer.forward(batch, "cross_entropy").result()
    return [o["logprobs"].tolist() for o in out.loss_fn_outputs]


def test_save_state_then_one_more_update(world: Any, tokenizer: Any) -> None:
    trainer = world["trainer"]
    world["state"] = trainer.save_state("s1").result().path
    assert world["state"] == f"tinker://{trainer.model_id}/weights/s1"
    world["batch"] = [datum(tokenizer.encode(t), prompt=1) for t in TEXTS[2:]]
    world["after"] = _step_then_forward(trainer, world["batch"])


def test_forward_backward_custom_runs_over_forward(world: Any) -> None:
    import torch

    trainer, batch = world["trainer"], world["batch"]
    ref = trainer.forward(batch, "cross_entropy").result().metrics["loss:sum"]

    def nll(data: list, logprobs: list) -> tuple[Any, dict]:
        w = [torch.tensor(d.loss_fn_inputs["weights"].data) for d in data]
        return sum(-(lp * wi).sum() for lp, wi in zip(logprobs, w, strict=True)), {}

    out = trainer.forward_backward_custom(batch, nll).result()
    assert math.isclose(out.metrics["loss:sum"], ref, rel_tol=1e-5), out.metrics


def test_bad_inputs_name_the_field_and_the_run_goes_on(world: Any, tokenizer: Any) -> None:
    trainer = world["trainer"]
    ids = tokenizer.encode(TEXTS[0])
    good = datum(ids)
    short = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 3)},
    )
    _fails(lambda: trainer.forward_backward([short], "cross_entropy").result(), "weights")
    oov = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:-1] + [10**7], "weights": [1.0] * (len(ids) - 1)},
    )
    _fails(lambda: trainer.forward_backward([oov], "cross_entropy").result(), "vocabulary")
    _fails(lambda: trainer.forward_backward([good], "gspo").result(), "loss_fn", "gspo")
    nan = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [float("nan")] * (len(ids) - 1)},
    )
    _fails(lambda: trainer.forward_backward([nan], "cross_entropy").result(), "weights", "nan")
    nan_config = {"beta": float("nan")}  # issue 48 item 5: was the worker's Python text
    _fails(
        lambda: trainer.forward_backward([good], "dro", nan_config).result(),
        "loss_fn_config.beta is nan; give a finite number.",
    )
    key = {"X-API-Key": world["keys"]["demo"]}
    step = httpx.post(  # no seq_id: queued at once, outside the SDK's own order
        world["svc"].url + "/api/v1/optim_step",
        json={"model_id": trainer.model_id, "adam_params": {"learning_rate": "x"}},
        headers=key,
    )
    done = httpx.post(
        world["svc"].url + "/api/v1/retrieve_future",
        json={"request_id": step.json()["request_id"]},
        headers=key,
        timeout=60,
    )
    assert done.json()["error"] == "adam_params.learning_rate is 'x'; give a finite number ≥ 0."
    other = tinker.ServiceClient(base_url=world["svc"].url, api_key=world["keys"]["other"])
    unselected = "HuggingFaceTB/SmolLM2-135M-Instruct"
    _fails(
        lambda: created(other.create_lora_training_client(base_model=unselected, rank=4)),
        "base_model",
        "not selected",
    )
    wrong = tinker.ServiceClient(base_url=world["svc"].url, api_key="tml-not-a-key")
    _fails(lambda: created(wrong.create_lora_training_client(base_model=TINY, rank=4)), "not known")
    r = httpx.post(  # another project's key does not reach this client
        world["svc"].url + "/api/v1/get_info",
        json={"model_id": trainer.model_id, "type": "get_info"},
        headers={"X-API-Key": world["keys"]["other"]},
    )
    assert r.status_code == 404 and "model_id" in r.json()["error"]["message"]

    out = trainer.forward_backward([good], "cross_entropy").result()
    assert math.isfinite(out.metrics["loss:sum"])
    trainer.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    world["client"].close("success").result()  # the session ends: its run SUCCEEDED
    run = _tinker_run(world["svc"])
    deadline = time.monotonic() + 120
    while run["state"] != "SUCCEEDED" and time.monotonic() < deadline:
        time.sleep(0.5)
        run = world["svc"].api("GET", f"/v1/training/runs/{run['id']}").json()
    assert run["state"] == "SUCCEEDED", run
    assert run["results"]["model"].startswith("demo/")  # its saves stay registered


def test_a_client_from_the_state_continues_bitwise(world: Any) -> None:
    client = tinker.ServiceClient(base_url=world["svc"].url, api_key=world["keys"]["demo"])
    made = client.create_training_client_from_state_with_optimizer(world["state"])
    again = _step_then_forward(created(made), world["batch"])
    assert again == world["after"]  # the same update from the same state, to the bit
    client.close("success").result()


def test_an_idle_client_saves_its_state_and_ends(world: Any) -> None:
    """No call after the client is created: the worker alone counts its 2 s idle window,
    so a slow machine makes the run end later, never fail. (A call made after the create
    had to reach the worker inside that window, which a loaded machine missed.)"""
    from importlib import resources

    import yaml

    svc = world["svc"]
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw.setdefault("service", {})["tinkerIdleSeconds"] = 2
    before = {r["id"] for r in _tinker_runs(svc)}
    (svc.home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    try:  # the window is read when the client is created
        client = tinker.ServiceClient(base_url=svc.url, api_key=world["keys"]["demo"])
        trainer = created(client.create_lora_training_client(base_model=TINY, rank=4))
    finally:
        (svc.home / "deployment.yaml").unlink()
    (run,) = [r for r in _tinker_runs(svc) if r["id"] not in before]
    run = wait_state(svc, run["id"], ("SUCCEEDED", "FAILED", "CANCELLED"))
    assert run["state"] == "SUCCEEDED", run
    path = f"tinker://{trainer.model_id}/weights/idle"
    ended = f"no call for 2 s (service.tinkerIdleSeconds); its state was saved as {path}"
    assert run["results"]["ended"] == ended
    again = created(client.create_training_client_from_state(path))  # it goes on from there
    assert again.forward(world["batch"], "cross_entropy").result().loss_fn_outputs
    client.close("success").result()


def test_an_admin_key_names_its_project(world: Any) -> None:
    svc = world["svc"]
    env = base_env(svc.home, svc.config_dir)
    args = [str(BIN / "akka-optimize"), "server", "token", "create", "--tinker"]
    admin = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    key = admin.stdout.strip().splitlines()[-1]
    nowhere = tinker.ServiceClient(base_url=svc.url, api_key=key)
    _fails(lambda: created(nowhere.create_lora_training_client(TINY, rank=4)), "project_id")
    client = tinker.ServiceClient(base_url=svc.url, api_key=key, project_id="other")
    trainer = created(client.create_lora_training_client(TINY, rank=4))
    runs = svc.api("GET", "/v1/training/runs", params={"project": "other"}).json()["runs"]
    assert [r["method"] for r in runs] == ["tinker"]
    assert trainer.model_id
    client.close("success").result()
