"""Checkpoints out (issue 53 "Checkpoints out and in"): ``save_weights_external`` and the
SDK's signed download URLs give a PEFT folder that transformers + PEFT load, answering as
the training client does; the SDK's own ``tinker checkpoint download`` fetches a saved
state the same way and removes its temporary export. The URLs need no key, but each opens
one file until it expires: a changed signature is refused, and another project's key
cannot ask for them. Official ``tinker==0.38.0`` SDK, unmodified, tiny model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tinker_kit import TINY, created, tinker_service

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

SEQ = [1, 504, 3180, 314, 1345, 30, 2, 2016, 314, 480, 12, 42]
FILES = {"adapter_config.json", "adapter_model.safetensors"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tinker-out")
    with tinker_service(tmp) as (svc, keys):
        yield {"svc": svc, "keys": keys, "tmp": tmp}


def _datum() -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints(SEQ[:-1]),
        loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [1.0] * (len(SEQ) - 1)},
    )


def _peft_logprobs(model_dir: Path, folder: Path) -> list[float]:
    """log p(SEQ[t+1] | SEQ[:t+1]) under the base model with the downloaded adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([SEQ[:-1]])).logits[0].float()
    lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(SEQ[1:])[:, None]).squeeze(1)
    return lp.tolist()


def _tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_external_weights_download_as_a_peft_folder_that_answers_as_the_trainer(
    world: Any, tiny_model_dir: Path
) -> None:
    svc, keys = world["svc"], world["keys"]
    client = tinker.ServiceClient(base_url=svc.url, api_key=keys["demo"])
    trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=3))
    trainer.forward_backward([_datum()], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    want = trainer.forward([_datum()], "cross_entropy").result().loss_fn_outputs[0]
    state = trainer.save_state("s1").result().path
    ext = trainer.save_weights_external("x").result().path
    assert ext == state.replace("/weights/s1", "/external_weights/x")
    rest = tinker.RestClient(base_url=svc.url, api_key=keys["demo"])
    kinds = {c.checkpoint_id: c.checkpoint_type for c in rest.list_checkpoints(
        ext.split("/")[2]).result().checkpoints}  # fmt: skip
    assert kinds["external_weights/x"] == "external"

    signed = rest.get_external_weights_urls(ext).result()
    assert FILES <= set(signed.urls)  # and PEFT's README.md
    folder = world["tmp"] / "direct"
    folder.mkdir()
    for name, url in signed.urls.items():
        r = httpx.get(url, timeout=60)  # no key: the signature is the permission
        assert r.status_code == 200, r.text
        (folder / name).write_bytes(r.content)
    got = _peft_logprobs(tiny_model_dir, folder)
    assert got == pytest.approx(want["logprobs"].tolist(), abs=1e-4)

    forged = signed.urls["adapter_config.json"].replace("signature=", "signature=0")
    r = httpx.get(forged, timeout=60)
    assert r.status_code == 403 and r.json()["error"]["field"] == "signature", r.text
    other = tinker.RestClient(base_url=svc.url, api_key=keys["other"])
    with pytest.raises(tinker.TinkerError) as refused:
        other.get_external_weights_urls(ext).result()
    assert "training_run_id" in str(refused.value) or "checkpoint_id" in str(refused.value)
    client.close("success").result()  # the CLI's export needs the one CPU device

    env = {
        **os.environ,
        "TINKER_BASE_URL": svc.url,
        "TINKER_API_KEY": keys["demo"],
        "TINKER_TELEMETRY": "0",
    }
    out = world["tmp"] / "cli"
    cli = [sys.executable, "-m", "tinker.cli", "checkpoint", "download", state, "-o", str(out)]
    done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (downloaded,) = out.iterdir()
    assert FILES <= {p.name for p in downloaded.iterdir()}
    a, b = _tensors(folder), _tensors(downloaded)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    left = rest.list_user_checkpoints().result().checkpoints
    assert not [c for c in left if c.checkpoint_id == "external_weights/download"]


def _json(out: Any) -> Any:
    return json.loads(out.stdout[out.stdout.index("{") :])


def test_a_tinker_checkpoint_registers_as_a_model_version_and_serves(world: Any) -> None:
    """``registry models register NS/NAME --from tinker://…`` (the route ``…/from-tinker``):
    the checkpoint's adapter becomes NS/NAME:v1 on its run's base model and an endpoint
    serves it; a training state, or another project's checkpoint, is refused naming path."""
    svc, keys = world["svc"], world["keys"]
    client = tinker.ServiceClient(base_url=svc.url, api_key=keys["demo"])
    trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=5))
    trainer.forward_backward([_datum()], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=0.05)).result()
    ext = trainer.save_weights_external("e").result().path
    state = trainer.save_state("st").result().path
    client.close("success").result()  # the endpoint needs the one CPU device

    args = ("registry", "models", "register")
    version = _json(svc.cli(*args, "demo/exported", "--from", ext, "-o", "json", check=True))
    assert version["created"] and version["ref"].startswith("demo/exported:v1"), version
    again = _json(svc.cli(*args, "demo/exported", "--from", ext, "-o", "json", check=True))
    assert not again["created"]  # the same adapter: its version, not a new one
    for name, path, words in (
        ("demo/exported", state, "training state"),
        ("other/exported", ext, "no training client of project 'other'"),
    ):
        refused = svc.cli(*args, name, "--from", path)
        assert refused.returncode != 0 and words in refused.stderr + refused.stdout, refused
    ep = _json(
        svc.cli("training", "endpoints", "create", "--model", "demo/exported:v1", "--wait",
                "-o", "json", check=True)
    )  # fmt: skip
    assert ep["state"] == "READY", ep
    r = svc.api(
        "POST",
        f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
        json={"model": "demo/exported:v1", "temperature": 0, "max_tokens": 4,
              "messages": [{"role": "user", "content": "What is 2 + 3?"}]},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    svc.cli("training", "endpoints", "delete", ep["id"], check=True)
