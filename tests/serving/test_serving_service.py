"""Endpoints through the live service and the real CLI: create, proxy, checks, limits."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serving_assets import FINAL_ANSWER, INSTRUCTIONS, TOOLS, make_random_adapter

from akka_optimize.serving.check import CHECK_PROMPTS, trainer_greedy
from helpers import BIN, free_port, hold_at, release, wait_held

TINY = "akka-optimize/tiny-smollm2"


def _tar(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for p in sorted(folder.iterdir()):
            tf.add(p, arcname=p.name)
    return buf.getvalue()


def _upload(service, folder: Path, name: str) -> dict:
    r = service.api(
        "POST",
        f"/v1/registry/models/proj/{name}",
        content=_tar(folder),
        params={"base_model": TINY},
    )
    assert r.status_code in (200, 201), r.text
    return r.json()


def create_endpoint(service, model: str) -> dict:
    """``endpoints create --model MODEL --wait -o json`` through the real CLI."""
    out = service.cli(
        "training", "endpoints", "create", "--model", model, "--wait", "-o", "json", check=True
    )
    return json.loads(out.stdout[out.stdout.index("{") :])


@contextlib.contextmanager
def proxied_client(service, endpoint_id: str) -> Iterator[tuple[openai.OpenAI, list[str]]]:
    """``endpoints proxy`` on a free port and an ``openai`` client pointed at it (with the
    ids ``/v1/models`` listed once the proxy answered)."""
    port = free_port()
    proxy = subprocess.Popen(
        [str(BIN / "akka-optimize"), "training", "endpoints", "proxy", endpoint_id]
        + ["--port", str(port)],
        env=service.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
        )
        for _ in range(300):
            try:
                models = [m.id for m in client.models.list().data]
                break
            except openai.APIConnectionError:
                assert proxy.poll() is None, proxy.stdout.read().decode()
                time.sleep(0.2)
        else:
            raise AssertionError("the proxy never answered")
        yield client, models
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


@pytest.fixture
def ready_service(service):
    service.api("POST", "/v1/training/projects", json={"name": "proj"}).raise_for_status()
    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    return service


def test_endpoint_over_an_adapter_serves_it_through_the_proxy(
    ready_service, lora_dirs, tiny_model_dir, tmp_path
):
    svc = ready_service
    _upload(svc, lora_dirs["alpha"], "alpha")
    ep = create_endpoint(svc, "proj/alpha")
    assert ep["state"] == "READY" and ep["projectName"] == "proj"
    name = ep["models"][0]["model"]
    assert name == "proj/alpha:v1"

    with proxied_client(svc, ep["id"][:8]) as (client, models):
        assert models == ["akka-optimize/tiny-smollm2:v1", "proj/alpha:v1"]
        served = [
            client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": p}], temperature=0, max_tokens=16
            )
            .choices[0]
            .message.content
            for p in CHECK_PROMPTS
        ]
        assert served == trainer_greedy(tiny_model_dir, lora_dirs["alpha"])["adapter"]
        stream = client.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": CHECK_PROMPTS[0]}],
            temperature=0,
            max_tokens=16,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == served[0]
        two = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Hi"}], n=2, seed=3, max_tokens=8
        )
        assert len(two.choices) == 2
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=-1
            )

    for _ in range(600):
        got = svc.api("GET", f"/v1/training/endpoints/{ep['id'][:6]}").json()
        chk = got["checks"][name]
        if chk and chk["state"] not in ("RUNNING",):
            break
        time.sleep(0.5)
    assert chk["state"] == "passed", chk
    assert [r["served"] for r in chk["prompts"]] == served

    listed = svc.cli("training", "endpoints", "list", check=True).stdout
    assert ep["id"][:8] in listed and "proj" in listed
    svc.cli("training", "endpoints", "delete", ep["id"][:8], check=True)
    assert svc.api("GET", f"/v1/training/endpoints/{ep['id']}").status_code == 404


def test_an_endpoint_answers_every_reference_to_the_versions_it_serves(ready_service, lora_dirs):
    """Issue 47 item 12: the registry's references (any case, bare name in the project,
    alias, digest, the base model's repository) name a served version; a version the
    endpoint does not serve is refused naming ``model``."""
    svc = ready_service
    pinned = _upload(svc, lora_dirs["beta"], "beta")["ref"]
    r = svc.api("PUT", "/v1/registry/models/proj/beta/aliases/champion", json={"version": "v1"})
    assert r.status_code == 200, r.text
    ep = create_endpoint(svc, "proj/beta")
    url = f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions"

    def ask(model: str):
        body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        return svc.api("POST", url, json=body)

    for ref in ("proj/beta", "PROJ/Beta:v1", "beta", "proj/beta:champion", pinned):
        r = ask(ref)
        assert (r.status_code, r.json().get("model")) == (200, "proj/beta:v1"), (ref, r.text)
    for ref in ("Akka-Optimize/Tiny-SmolLM2", "akka-optimize/tiny-smollm2:v1"):
        r = ask(ref)
        assert (r.status_code, r.json().get("model")) == (200, TINY + ":v1"), (ref, r.text)
    text = {"model": "beta", "prompt": "The sea", "max_tokens": 0, "echo": True, "logprobs": 1}
    r = svc.api("POST", url.replace("chat/completions", "completions"), json=text)
    assert r.status_code == 200, r.text  # item 11: what lm-eval's local-completions sends
    assert r.json()["model"] == "proj/beta:v1" and r.json()["choices"][0]["text"] == "The sea"
    assert r.json()["choices"][0]["logprobs"]["token_logprobs"][0] is None
    for ref in ("proj/beta:v2", "proj/other"):
        r = ask(ref)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "model" and ref in r.json()["error"]["message"]


def test_create_refuses_an_adapter_above_the_rank_and_a_base_model_without_project(
    ready_service, tiny_model_dir, tmp_path
):
    svc = ready_service
    big = make_random_adapter(tiny_model_dir, tmp_path / "big", seed=3, rank=128)
    r = svc.api(
        "POST", "/v1/registry/models/proj/big", content=_tar(big), params={"base_model": TINY}
    )  # refused when registered (F118), so no endpoint can be asked to load it
    assert r.status_code == 400 and "rank 128 is above" in r.json()["error"]["message"]
    assert "largest, 64" in r.json()["error"]["message"]
    r = svc.cli("training", "endpoints", "create", "--model", "proj/big")
    assert r.returncode == 1 and "proj/big" in r.stderr
    r = svc.cli("training", "endpoints", "create", "--model", TINY)
    assert r.returncode == 1 and "--project" in r.stderr
    assert svc.api("GET", "/v1/training/endpoints").json()["endpoints"] == []


def test_info_shows_what_an_endpoint_can_serve(service):
    out = service.cli("training", "endpoints", "info", check=True).stdout
    for label in (
        "Largest adapter rank",
        "Adapters loaded at once",
        "Reserved devices",
        "Longest context",
        "Idle time before stopping",
        "Adapters merged while served",
        "LlamaForCausalLM: tool calls hermes",
    ):
        assert label in out


def _create_watching_the_start(svc, model: str, tmp_path: Path) -> dict:
    """F111: ``endpoints create`` held while the model loads its weights; the endpoint is
    STARTING and says what the model is doing (not a queue position), and ``endpoints wait``
    without a terminal prints that milestone as one line before READY."""
    milestone = "loading the base model weights"
    hold_at(svc, f"starting: {milestone}")
    ep = json.loads(
        svc.cli("training", "endpoints", "create", "--model", model, "-o", "json").stdout
    )
    wait_held(svc)
    deadline = time.monotonic() + 60  # the service reads the worker's status as it changes
    while (got := svc.api("GET", f"/v1/training/endpoints/{ep['id']}").json())[
        "activity"
    ] != f"the model is {milestone}":
        assert time.monotonic() < deadline and got["state"] == "STARTING", got
        time.sleep(0.1)
    assert got["state"] == "STARTING"
    log = tmp_path / "wait.err"
    with log.open("w") as err:
        waiting = subprocess.Popen(
            [str(BIN / "akka-optimize"), "training", "endpoints", "wait", ep["id"]],
            env=svc.env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        deadline = time.monotonic() + 60
        while f"STARTING: the model is {milestone}" not in log.read_text():
            assert time.monotonic() < deadline and waiting.poll() is None, log.read_text()
            time.sleep(0.1)
        release(svc)
        assert waiting.wait(timeout=120) == 0, log.read_text()
    lines = log.read_text().splitlines()
    assert len(lines) == len(set(lines)) and not any("queued" in x for x in lines), lines
    return svc.api("GET", f"/v1/training/endpoints/{ep['id']}").json()


def test_tool_call_round_trip_through_the_proxy(ready_service, lora_dirs, tmp_path):
    svc = ready_service
    _upload(svc, lora_dirs["tools"], "tools")
    ep = _create_watching_the_start(svc, "proj/tools", tmp_path)
    assert ep["state"] == "READY", ep
    with proxied_client(svc, ep["id"]) as (client, _models):
        system = {"role": "system", "content": INSTRUCTIONS}
        q = {"role": "user", "content": "Weather in Paris?"}
        r = client.chat.completions.create(
            model="proj/tools:v1", messages=[system, q], tools=TOOLS, temperature=0, max_tokens=40
        )
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls"
        (call,) = msg.tool_calls
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        follow = [
            system,
            q,
            msg.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'},
        ]
        r2 = client.chat.completions.create(
            model="proj/tools:v1", messages=follow, tools=TOOLS, temperature=0, max_tokens=40
        )
        assert r2.choices[0].message.content.startswith(FINAL_ANSWER)
        assert not r2.choices[0].message.tool_calls
