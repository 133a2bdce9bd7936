"""The Ray executor (issue 25 item 1): a run's worker placed on a real Ray cluster.

``ray start --head`` (one node, CPU resources) is started by the test; the service's
deployment file says ``executor: {kind: ray, address: …}``. A supervised run on the tiny
model is placed as a detached actor that reserves one CPU, succeeds and registers its
model, which an endpoint then serves from another actor; killing the actor (what losing its node does) fails the run with a sentence naming
``runs resume``, and the resumed run succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import resources

import pytest
import yaml
from jobs_helpers import run_json, setup_project, wait_state, write_plan

from helpers import BIN, LiveService, free_port, hold_at, release, wait_held

pytest.importorskip("ray")

NAMESPACE = "akka-test"


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A one-node Ray cluster on a loopback port; yields its address."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
    # A node gives up on a silent control store after this many seconds (Ray's default 60):
    # the outage test's worker then ends with its node rather than a minute later.
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_gcs_rpc_server_reconnect_timeout_s": "8",
    }
    cmd = [str(BIN / "ray"), "start", "--head", "--port", str(port), "--num-cpus", "2",
           "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp,
           "--node-ip-address", "127.0.0.1",
           "--object-store-memory", str(100 * 1024 * 1024)]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, capture_output=True,
                       timeout=120)  # fmt: skip
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_service(ray_head, tmp_path) -> Iterator[LiveService]:
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw["executor"] = {"kind": "ray", "address": ray_head, "namespace": NAMESPACE,
                       "nodeIpAddress": "127.0.0.1", "outageSeconds": 5}  # fmt: skip
    dep = tmp_path / "deployment.yaml"
    dep.write_text(yaml.safe_dump(raw))
    svc = LiveService(
        home=tmp_path / "home",
        config_dir=tmp_path / "config",
        port=free_port(),
        extra_env={"AKKA_OPTIMIZE_DEPLOYMENT": str(dep), "RAY_USAGE_STATS_ENABLED": "0"},
    )
    with svc.running():
        yield svc


def _actors(address: str) -> list[str]:
    """Names of the live job actors in the test namespace (asked from a fresh driver)."""
    return _ask(address, "from ray.util import list_named_actors\nanswer = list_named_actors()")


def _ask(address: str, code: str) -> object:
    """What ``code`` leaves in ``answer``, run by a fresh driver connected to the cluster."""
    script = (
        "import ray, json\n"
        f"ray.init(address={address!r}, namespace={NAMESPACE!r}, log_to_driver=False,"
        " _node_ip_address='127.0.0.1')\n"
        f"{code}\nprint(json.dumps(answer))\n"
    )
    out = subprocess.run([str(BIN / "python"), "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _wait_released(address: str, timeout: float = 120) -> None:
    """Until no job actor is left: the scheduler releases an ended worker's actor on its
    next pass after the worker exits, which can come after the run's last event."""
    deadline = time.monotonic() + timeout
    while names := _actors(address):
        assert time.monotonic() < deadline, f"job actors still alive after {timeout}s: {names}"
        time.sleep(0.5)


def _serve_on_ray(svc: LiveService, ray_head: str, model: str) -> None:
    """The registered model served by an endpoint whose worker is a Ray actor: it answers
    through the service, and deleting the endpoint releases the actor."""
    out = svc.cli("training", "endpoints", "create", "--model", model, "--wait", "-o", "json",
                  check=True)  # fmt: skip
    ep = json.loads(out.stdout[out.stdout.index("{") :])
    assert ep["state"] == "READY", ep
    names = _actors(ray_head)
    assert len(names) == 1 and names[0].startswith("akka-job-"), names
    status = next((svc.home / "serving" / "workers").glob("*/status.json")).read_text()
    nodes = _ask(ray_head, "answer = [n['NodeManagerAddress'] for n in ray.nodes()]")
    assert json.loads(status)["host"] == nodes[0]  # it listens where the cluster says its node is
    r = svc.api(
        "POST",
        f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
        json={"model": model.split("@")[0], "temperature": 0, "max_tokens": 4,
              "messages": [{"role": "user", "content": "What is 2 + 3?"}]},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    svc.cli("training", "endpoints", "delete", ep["id"], check=True)
    _wait_released(ray_head)


def test_a_run_placed_on_ray_trains_registers_and_resumes_after_its_actor_is_killed(
    ray_head, ray_service, tmp_path
) -> None:
    svc = ray_service
    setup_project(svc, tmp_path, rows=4)
    plan = write_plan(tmp_path / "plan.json", epochs=2, execution={"saveEverySteps": 1})

    out = svc.cli("training", "runs", "start", "-f", str(plan), "--wait", "-o", "json",
                  check=True)  # fmt: skip
    run = json.loads(out.stdout[out.stdout.index("{") :])
    assert run["state"] == "SUCCEEDED", run
    assert run["results"]["model"].startswith("demo/")
    _wait_released(ray_head)  # the ended worker's actor is released (its CPU freed)
    _serve_on_ray(svc, ray_head, run["results"]["model"])

    # a second run, held after update 2 (update 1 is saved); its actor killed as a lost
    # node would be: the worker dies with it
    hold_at(svc, "step-2")
    started = run_json(svc, "training", "runs", "start", "-f", str(plan), "--yes")
    run_id = started["id"]
    wait_held(svc)
    names = _actors(ray_head)
    assert len(names) == 1 and names[0].startswith("akka-job-"), names
    kill = (
        "import ray\n"
        f"ray.init(address={ray_head!r}, namespace={NAMESPACE!r}, log_to_driver=False,"
        " _node_ip_address='127.0.0.1')\n"
        f"ray.kill(ray.get_actor({names[0]!r}))\n"
    )
    done = subprocess.run([str(BIN / "python"), "-c", kill], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    release(svc)
    failed = wait_state(svc, run_id, ("FAILED",), timeout=120)
    assert "resume" in failed["failure"] and failed["results"]["lastSavedStep"] == 1, failed

    svc.cli("training", "runs", "resume", run_id, check=True)
    resumed = wait_state(svc, run_id, ("SUCCEEDED",), timeout=300)
    assert resumed["results"]["model"].startswith("demo/")
    _wait_released(ray_head)


def test_a_cluster_that_stops_answering_fails_the_run_with_the_outage_sentence(
    ray_head, ray_service, tmp_path
) -> None:
    """The head's control store (``gcs_server``) killed mid-run (the last test of the
    module: the cluster stays down), while the worker is held at a step, so it neither
    finishes nor dies before the service decides. The run keeps its phase while the
    cluster does not answer, then, past ``executor.outageSeconds`` (5 s here, 900 by
    default), fails saying the cluster could not be reached, not with an exit code; the
    service itself keeps answering."""
    svc = ray_service
    setup_project(svc, tmp_path, rows=4)
    plan = write_plan(tmp_path / "plan.json", epochs=2, execution={"saveEverySteps": 1})
    hold_at(svc, "step-2")
    run_id = run_json(svc, "training", "runs", "start", "-f", str(plan), "--yes")["id"]
    wait_held(svc)
    stop = subprocess.run(["pkill", "-9", "-x", "gcs_server"], capture_output=True, text=True)
    assert stop.returncode == 0, "no gcs_server process to stop"
    failed = wait_state(svc, run_id, ("FAILED",), timeout=400)
    release(svc)
    assert failed["failure"].startswith(f"The Ray cluster at {ray_head} could not be reached")
    assert "5 s (executor.outageSeconds)" in failed["failure"], failed["failure"]
    assert "exited with code" not in failed["failure"]
    assert svc.api("GET", "/healthz").status_code == 200
