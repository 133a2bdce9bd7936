"""How a Tinker training client's run ends besides ``close()`` (issue 53 breaks 1-4): a
``training runs cancel``, a client killed without closing (its heartbeats stop), and what
``runs get`` and a wrong key answer. The official ``tinker`` SDK against a live service on
the tiny model; one client at a time (the CI's one CPU device would queue a second), each
ended before the next test starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from importlib import resources
from typing import Any

import httpx
import pytest
import yaml
from tinker_kit import TINY, created, tinker_service

from helpers import LiveService
from jobs.jobs_helpers import wait_state

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

BATCH = [
    types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7, 8]),
        loss_fn_inputs={"target_tokens": [6, 7, 8, 9], "weights": [1.0, 1.0, 1.0, 1.0]},
    )
]
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with tinker_service(tmp_path_factory.mktemp("tinker-life")) as (svc, keys):
        yield {"svc": svc, "keys": keys}


def _run_ids(svc: LiveService) -> set[str]:
    runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
    return {r["id"] for r in runs if r["method"] == "tinker"}


def test_an_unknown_key_names_the_header_it_came_in(world: Any) -> None:
    r = httpx.post(
        f"{world['svc'].url}/api/v1/client/config", headers={"X-API-Key": "tml-nosuchkey"}
    )
    assert r.status_code == 401
    assert "The X-API-Key is not known to this service" in r.text, r.text
    assert "bearer" not in r.text.lower()
    none = httpx.post(f"{world['svc'].url}/api/v1/client/config")
    assert none.status_code == 401
    assert "This request has no X-API-Key header" in none.text, none.text


def test_cancel_ends_a_live_client_and_keeps_its_saved_state(world: Any) -> None:
    svc = world["svc"]
    client = tinker.ServiceClient(base_url=svc.url, api_key=world["keys"]["demo"])
    before = _run_ids(svc)
    trainer = created(client.create_lora_training_client(base_model=TINY, rank=4))
    (run_id,) = _run_ids(svc) - before
    trainer.forward_backward(BATCH, "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = trainer.save_state("before").result().path

    shown = svc.cli("training", "runs", "get", run_id)  # break 3: it crashed
    assert shown.returncode == 0, shown.stderr
    assert "Adapted modules" in shown.stdout

    cancel = svc.cli("training", "runs", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    ended = wait_state(svc, run_id, ENDED)
    assert ended["state"] == "CANCELLED", ended
    with pytest.raises(tinker.TinkerError):
        trainer.forward(BATCH, "cross_entropy").result()
    # its device is free (one CPU device: a new client would queue otherwise), its state kept
    again = created(client.create_training_client_from_state(path))
    assert again.forward(BATCH, "cross_entropy").result().loss_fn_outputs
    client.close("success").result()


CHILD = """
import sys, time, tinker
client = tinker.ServiceClient(base_url=sys.argv[1], api_key=sys.argv[2])
made = client.create_lora_training_client(base_model=sys.argv[3], rank=4)
trainer = made.result() if hasattr(made, "result") else made
print(trainer.save_state("mine").result().path, flush=True)
time.sleep(3600)
"""


def test_a_killed_client_ends_when_its_heartbeats_stop(world: Any) -> None:
    """A client process killed with SIGKILL (no ``close()``): with
    ``tinkerHeartbeatSeconds: 15`` its run ends after 15 s without a heartbeat (the SDK
    beats every 10 s), its state saved as ``weights/heartbeat`` and its earlier save kept.
    The wait is generous; old code held the run for ``tinkerIdleSeconds`` (1800 s)."""
    svc = world["svc"]
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw.setdefault("service", {})["tinkerHeartbeatSeconds"] = 15
    (svc.home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    before = _run_ids(svc)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", CHILD, svc.url, world["keys"]["demo"], TINY]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    try:
        saved = child.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        (svc.home / "deployment.yaml").unlink()
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert saved.startswith("tinker://"), saved
    model_id = saved.removeprefix("tinker://").split("/")[0]
    (run_id,) = _run_ids(svc) - before
    run = wait_state(svc, run_id, ENDED, timeout=300)
    assert run["state"] == "SUCCEEDED", run
    path = f"tinker://{model_id}/weights/heartbeat"
    want = "the client sent no heartbeat for 15 s (service.tinkerHeartbeatSeconds)"
    assert run["results"]["ended"] == f"{want}; its state was saved as {path}"
    client = tinker.ServiceClient(base_url=svc.url, api_key=world["keys"]["demo"])
    again = created(client.create_training_client_from_state(path))  # the device is free
    assert again.forward(BATCH, "cross_entropy").result().loss_fn_outputs
    client.close("success").result()
