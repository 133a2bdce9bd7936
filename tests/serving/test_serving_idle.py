"""An idle endpoint stops and restarts on the next request; a service restart never
leaves a post-deploy check RUNNING (issue 8 "Limits", "Post-deploy check")."""

from __future__ import annotations

import threading
import time
from importlib import resources

from serving_assets import make_random_adapter
from test_serving_service import TINY, _upload, create_endpoint

from helpers import LiveService, free_port, hold_at, release, wait_held

IDLE = 2


def _service(tmp_path) -> LiveService:
    home = tmp_path / "home"
    home.mkdir()
    shipped = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    assert "idleSeconds: 900" in shipped
    (home / "deployment.yaml").write_text(
        shipped.replace("idleSeconds: 900", f"idleSeconds: {IDLE}")
    )
    return LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()


def _endpoint(svc: LiveService, endpoint_id: str) -> dict:
    return svc.api("GET", f"/v1/training/endpoints/{endpoint_id}").json()


def _wait(svc: LiveService, endpoint_id: str, pred, seconds: float = 120) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ep = _endpoint(svc, endpoint_id)
        if pred(ep):
            return ep
        time.sleep(0.2)
    raise AssertionError(f"endpoint never reached the expected state: {ep}")


def _chat(svc: LiveService, endpoint_id: str, model: str, max_tokens: int, n: int = 1) -> dict:
    r = svc.api(
        "POST",
        f"/v1/training/endpoints/{endpoint_id}/openai/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "n": n,
        },
        timeout=300,
    )
    assert r.status_code == 200, r.text
    return r.json()


def _create(svc: LiveService, tmp_path, tiny_model_dir) -> tuple[str, str]:
    svc.api("POST", "/v1/training/projects", json={"name": "proj"}).raise_for_status()
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    _upload(svc, make_random_adapter(tiny_model_dir, tmp_path / "ad", seed=5), "idle")
    ep = create_endpoint(svc, "proj/idle")
    assert ep["state"] == "READY"
    return ep["id"], ep["models"][0]["model"]


def test_an_idle_endpoint_stops_and_the_next_request_starts_it(tmp_path, tiny_model_dir):
    svc = _service(tmp_path)
    try:
        eid, model = _create(svc, tmp_path, tiny_model_dir)
        _wait(svc, eid, lambda e: e["checks"][model] and e["checks"][model]["state"] != "RUNNING")
        first = _chat(svc, eid, model, 12)["choices"][0]["message"]["content"]

        stopped = _wait(svc, eid, lambda e: e["state"] == "STOPPED", seconds=IDLE + 30)
        assert f"idle for {IDLE}s" in stopped["activity"]

        again = _chat(svc, eid, model, 12)["choices"][0]["message"]["content"]
        assert again == first
        assert _endpoint(svc, eid)["state"] == "READY"

        # A request longer than the idle time is answered whole: a busy worker is not
        # idle. The worker holds the answer until the test releases it (no clock bet).
        hold_at(svc, "answer")
        answers: list[dict] = []
        t = threading.Thread(target=lambda: answers.append(_chat(svc, eid, model, 12, n=2)))
        t.start()
        try:
            wait_held(svc)
            busy = _wait(svc, eid, lambda e: (e["idleSeconds"] or 0) > IDLE + 1, seconds=60)
            assert busy["state"] == "READY", busy
        finally:
            release(svc)
            t.join(timeout=300)
        assert not t.is_alive(), "the held answer did not come within 300 s of its release"
        [long] = answers
        assert [c["finish_reason"] for c in long["choices"]] == ["length"] * 2
        assert long["usage"]["completion_tokens"] == 2 * 12
        assert long["choices"][0]["message"]["content"] == first
        assert _endpoint(svc, eid)["state"] == "READY"
    finally:
        svc.stop()


def test_a_check_cut_off_by_a_restart_runs_again_at_the_next_start(tmp_path, tiny_model_dir):
    from sqlalchemy import select

    from akka_optimize.db import Database
    from akka_optimize.db.models.serving import EndpointModel
    from akka_optimize.settings import Settings

    svc = _service(tmp_path)
    try:
        eid, model = _create(svc, tmp_path, tiny_model_dir)
        _wait(svc, eid, lambda e: e["checks"][model] and e["checks"][model]["state"] != "RUNNING")
    finally:
        svc.stop()
    # The service died while the check ran: its row says RUNNING.
    db = Database(Settings(home=svc.home).database_url)
    with db.session() as s:
        row = s.scalars(select(EndpointModel).where(EndpointModel.endpoint_id == eid)).one()
        row.checks = {"state": "RUNNING", "findings": [], "prompts": []}
    db.dispose()

    svc.start()
    try:
        ep = _endpoint(svc, eid)
        assert ep["state"] == "STOPPED" and ep["checks"][model] is None
        _chat(svc, eid, model, 4)  # starts the endpoint, which checks the adapter again
        done = _wait(
            svc, eid, lambda e: e["checks"][model] and e["checks"][model]["state"] != "RUNNING"
        )
        assert done["checks"][model]["state"] == "passed", done["checks"][model]
    finally:
        svc.stop()
