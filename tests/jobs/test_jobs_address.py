"""A service that comes back at another address mid-run (issue 14 item 8).

The service publishes its address in the blob store at start; a worker that cannot
reach the address in its spec follows the published one. A worker that reaches no
service within its retry window (``service.workerRetrySeconds``, set to 1 s here) ends
its attempt with exit code 3, without waiting longer; the service then fails the run
with a sentence. No test waits on a clock: the window only bounds the retries."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from akka_optimize.jobs import worker
from akka_optimize.jobs.address import (
    ADDRESS_KEY,
    UNREACHABLE_EXIT,
    current_address,
    publish_address,
    unreachable_sentence,
)
from akka_optimize.jobs.spec import JobSpec
from akka_optimize.store import BlobStore
from helpers import LiveService, free_port


def _spec(tmp_path: Path, callback: str, retry_s: float = 1) -> JobSpec:
    return JobSpec(
        run_id="0123abcd",
        attempt=1,
        callback_url=callback,
        token="ak_w_not-a-real-token",
        blobs_url=str(tmp_path / "blobs"),
        model_dir=str(tmp_path / "no-model"),
        dataset={"pinned": "triage/train:v1@sha256:" + "0" * 64, "metadata": {}},
        engine={},
        loss={},
        max_seq_length=64,
        state_prefix="runs/0123abcd/saves",
        extra={"work_dir": str(tmp_path / "work"), "retry_s": retry_s},
    )


def test_a_worker_follows_the_address_the_service_published(service: LiveService, tmp_path):
    store = BlobStore(str(service.home / "blobs"))
    assert current_address(store) == service.url  # published at start
    dead = f"http://127.0.0.1:{free_port()}"  # where the service was before it moved
    client = worker.EventClient(_spec(tmp_path, dead, retry_s=60), store)
    client.send({"type": "progress", "step": 1})
    # Delivered to the live service, which refused the made-up attempt token (401):
    # the worker reached it at its new address instead of retrying the old one.
    assert client.base == service.url
    assert client.url == f"{service.url}/v1/training/runs/0123abcd/attempts/1/events"


def test_a_worker_that_reaches_no_service_ends_its_attempt(tmp_path):
    store = BlobStore(str(tmp_path / "blobs"))
    dead = f"http://127.0.0.1:{free_port()}"
    publish_address(store, f"http://127.0.0.1:{free_port()}")  # also gone
    client = worker.EventClient(_spec(tmp_path, dead), store)
    with pytest.raises(worker.ServiceUnreachable, match="for 1 s"):
        client.send({"type": "progress", "step": 1})
    with pytest.raises(worker.ServiceUnreachable):  # later events do not retry again
        client.send({"type": "failed", "reason": "x"})
    # A whole attempt: the training fails (no model), and the failure cannot be reported,
    # so the worker exits with the code the service turns into a sentence.
    assert worker.run(_spec(tmp_path, dead)) == UNREACHABLE_EXIT
    assert "could not reach the service for 300 s" in unreachable_sentence(300)


def test_a_bad_published_address_is_ignored(tmp_path):
    store = BlobStore(str(tmp_path / "blobs"))
    assert current_address(store) is None
    store.put_bytes(ADDRESS_KEY, b"not json")
    assert current_address(store) is None
    store.put_bytes(ADDRESS_KEY, b'{"url": "file:///etc"}')
    assert current_address(store) is None


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z"


def test_a_service_that_comes_back_fails_the_run_whose_worker_gave_up(tmp_path) -> None:
    """The service stops while its worker is mid-run; the worker gives up after its window
    (1 s) and exits 3. The service that comes back, at another port, did not launch the
    worker and cannot read its exit code: it reads the give-up the worker recorded in the
    store, fails the run with the sentence that says so, and the device is free again."""
    import json
    from importlib import resources

    import yaml
    from jobs_helpers import run_json, setup_project, wait_state, worker_pid, write_plan

    from helpers import hold_at, release, wait_held

    home = tmp_path / "home"
    home.mkdir()
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw["service"]["workerRetrySeconds"] = 1
    (home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    first = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    try:
        setup_project(first, tmp_path)
        plan = write_plan(tmp_path / "plan.json", epochs=1)
        hold_at(first, "step-1")
        run_id = run_json(first, "training", "runs", "start", "-f", str(plan))["id"]
        wait_held(first)
        pid = worker_pid(run_id)
    finally:
        first.stop()
    release(first)  # step 1's metrics now go nowhere: the worker retries 1 s, then exits
    deadline = time.monotonic() + 120
    while not _gone(pid):
        assert time.monotonic() < deadline, "the worker did not give up"
        time.sleep(0.1)
    store = BlobStore(str(home / "blobs"))
    assert json.loads(store.get_bytes(f"runs/{run_id}/attempts/1/unreachable.json")) == {
        "seconds": 1.0
    }
    back = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    try:
        failed = wait_state(back, run_id, ("FAILED",), timeout=60)
        assert failed["failure"] == unreachable_sentence(1), failed["failure"]
        again = run_json(back, "training", "runs", "start", "-f", str(plan), "--wait")
        assert again["state"] == "SUCCEEDED", again  # the one cpu device was freed
    finally:
        back.stop()
