"""F071: a supervised run on several devices tokenizes its rows before it claims them
(seeds/001 "A supervised run on more than one device tokenizes its rows before claiming
GPUs"). While its preparation attempt is held at a known row count the run is PREPARING
with completed and total rows and the capacity report shows no device held; a pause is
refused; a cancel ends it CANCELLED; a preparation that reports nothing within the
deployment's startup timeout fails the run with a sentence; a released one trains on its
two gloo ranks from the stored rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jobs_helpers import TINY, two_cpu_deployment, wait_state, write_plan

from helpers import LiveService, free_port, gsm8k_rows, hold_at, release, wait_held


def _service(tmp_path: Path, startup_timeout_s: float) -> LiveService:
    """A service whose cpu profile has two devices, with ``service.startupTimeoutSeconds``
    as given; project demo with 5 rows of demo/train."""
    home = tmp_path / "home"
    home.mkdir()
    two_cpu_deployment(home, service={"startupTimeoutSeconds": startup_timeout_s})
    svc = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    data = gsm8k_rows(tmp_path / "train.jsonl", 5, system="Answer with #### N.")
    svc.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)
    return svc


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory):
    """One service for the tests whose preparation is released (startup timeout 600 s)."""
    svc = _service(tmp_path_factory.mktemp("patient"), 600)
    try:
        yield svc
    finally:
        release(svc)
        svc.stop()


def _start_two_ranks(svc: LiveService, tmp_path: Path) -> str:
    path = write_plan(
        tmp_path / "two.json",
        epochs=1,
        microBatchPerGpu=1,
        execution={"gpus": 2, "deviceProfile": "cpu"},
    )
    r = svc.api("POST", "/v1/training/runs", json=json.loads(path.read_text()))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _devices_in_use(svc: LiveService) -> int:
    cap = svc.api("GET", "/v1/training/capacity").json()
    return sum(p["inUse"] for p in cap["pools"])


def test_preparing_holds_no_devices_then_trains_from_stored_rows(
    patient: LiveService, tmp_path: Path
) -> None:
    hold_at(patient, "tokenized-0")  # the preparation's first report: 0 of 5 rows
    run_id = _start_two_ranks(patient, tmp_path)
    wait_held(patient)
    run = patient.api("GET", f"/v1/training/runs/{run_id}").json()
    assert run["state"] == "PREPARING", run
    assert run["results"]["preparing"] == {"rowsDone": 0, "rowsTotal": 5}, run["results"]
    assert _devices_in_use(patient) == 0
    paused = patient.api("POST", f"/v1/training/runs/{run_id}/pause")
    assert paused.status_code == 409 and "tokenizing" in paused.json()["error"]["message"]
    release(patient)
    run = wait_state(patient, run_id, ("SUCCEEDED", "FAILED"))
    assert run["state"] == "SUCCEEDED", run
    assert run["results"]["preparing"] == {"rowsDone": 5, "rowsTotal": 5}, run["results"]
    # 5 rows, one per pass on each of two ranks: updates of 2, 2 and 1 rows
    assert run["results"]["step"] == 3, run["results"]
    # the ranks read the rows the preparation attempt stored (attempt 1 held no device)
    assert (patient.home / "runs" / run_id / "prepared-rows.pkl").is_file()
    specs = [json.loads((patient.home / "runs" / run_id / f"attempt-{n}" / "spec.json").read_text())
             for n in (1, 2)]  # fmt: skip
    assert [s["engine"]["ranks"] for s in specs] == [1, 2], specs


def test_cancel_while_preparing_ends_cancelled(patient: LiveService, tmp_path: Path) -> None:
    hold_at(patient, "tokenized-0")
    run_id = _start_two_ranks(patient, tmp_path)
    wait_held(patient)
    assert patient.api("POST", f"/v1/training/runs/{run_id}/cancel").status_code == 200
    release(patient)
    run = wait_state(patient, run_id, ("CANCELLED", "FAILED", "SUCCEEDED"))
    assert run["state"] == "CANCELLED", run
    assert run["results"]["step"] in (0, None), run["results"]
    assert _devices_in_use(patient) == 0


def test_a_stalled_preparation_fails_with_a_sentence(tmp_path: Path) -> None:
    svc = _service(tmp_path, 1)
    try:
        hold_at(svc, "tokenized-0")  # never released: the preparation reports nothing more
        run_id = _start_two_ranks(svc, tmp_path)
        run = wait_state(svc, run_id, ("FAILED", "SUCCEEDED", "CANCELLED"))
        assert run["state"] == "FAILED", run
        assert run["failure"].startswith(
            "Tokenizing the rows reported no progress for 1 seconds"
        ), run
        assert "before it claimed any device" in run["failure"]
        assert _devices_in_use(svc) == 0
    finally:
        release(svc)
        svc.stop()
