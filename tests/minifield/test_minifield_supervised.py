"""Supervised mode: recipe runs submitted to a live service and claimed by
``minifield-worker supervise`` (issue 26 item 2), on the tiny tied-embedding model, CPU."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from minifield_kit import events, recipe_doc, write_recipe

from akka_optimize.minifield.supervise import Heartbeat
from akka_optimize.minifield.train import Worker
from akka_optimize.worker_events import Attempt, EventClient
from helpers import LiveService, free_port

PACKED = {"schema_version": "12.0.0", "implementation": "hf-causal-lm-v1", "computation": "12.0.0"}


@pytest.fixture(scope="module")
def svc(tmp_path_factory, tiny_model_dir) -> Iterator[LiveService]:
    """One service for the module; each test works in its own project with its own token
    (a project token claims only its project's recipe runs)."""
    yield from _service(tmp_path_factory.mktemp("svc"), _roots(tmp_path_factory, tiny_model_dir))


def _roots(tmp_path_factory, tiny_model_dir: Path) -> list[str]:
    """``service.recipeRoots`` of these tests: their temporary folders and the tiny model's."""
    return [str(tmp_path_factory.getbasetemp()), str(tiny_model_dir)]


def _service(
    folder: Path, roots: list[str], heartbeat_s: int | None = None
) -> Iterator[LiveService]:
    """A live service homed in ``folder`` reading recipes under ``roots``, with
    ``service.recipeHeartbeatSeconds`` set to ``heartbeat_s`` in its deployment file when
    given; stopped when the caller is done."""
    (folder / "home").mkdir()
    dep = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    raw = yaml.safe_load(dep)
    raw["service"]["recipeRoots"] = roots
    if heartbeat_s is not None:
        raw["service"]["recipeHeartbeatSeconds"] = heartbeat_s
    (folder / "home" / "deployment.yaml").write_text(yaml.safe_dump(raw))
    service = LiveService(home=folder / "home", config_dir=folder / "config", port=free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def demo(svc, request) -> Project:
    name = request.node.name.removeprefix("test_").replace("_", "-")[:40]
    svc.cli("training", "projects", "create", name, check=True)
    return Project(svc, name, svc.create_token(name))


class Project:
    """A project of the module's service and a token acting only in it."""

    def __init__(self, service: LiveService, name: str, token: str) -> None:
        self.service, self.name, self.token = service, name, token

    def cli_json(self, *args: str) -> Any:
        out = self.service.cli(*args, "-o", "json", check=True, env=self.env())
        return json.loads(out.stdout)

    def env(self) -> dict[str, str]:
        return self.service.env(AKKA_OPTIMIZE_TOKEN=self.token)

    def submit(self, path: Path) -> dict[str, Any]:
        return self.cli_json("training", "recipes", "submit", str(path), "--project", self.name)

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("headers", {"Authorization": f"Bearer {self.token}"})
        return httpx.request(method, self.service.url + path, timeout=120, **kw)

    def supervise(self, out: Path, *args: str) -> subprocess.CompletedProcess:
        """``minifield-worker supervise --once`` as a subprocess of this interpreter."""
        cmd = [sys.executable, "-m", "akka_optimize.minifield.cli", "supervise", "--url"]
        cmd += [self.service.url, "--token", self.token, "--output", str(out), "--once"]
        cmd += ["--device", "cpu", *args]
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=600)


def test_a_claimed_recipe_run_succeeds_with_its_identity_and_loss(demo, tmp_path, tiny_model_dir):
    path = write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=3))
    direct = Worker(path, tmp_path / "unused")
    run = demo.submit(path)
    assert run["method"] == "recipe" and run["state"] == "QUEUED"
    assert run["recipe"]["computationIdentity"] == direct.identity
    assert (run["recipe"]["strategy"], run["recipe"]["computation"]) == ("packed-sft", "12.0.0")
    assert run["recipe"]["updates"] == 3
    assert "waiting for a minifield-worker that accepts computation 12.0.0" in run["queueReason"]
    listed = demo.cli_json("training", "runs", "list", "--project", demo.name)["runs"]
    assert [r["id"] for r in listed] == [run["id"]]

    done = demo.supervise(tmp_path / "work")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {run['id']} SUCCEEDED" in done.stdout

    got = demo.cli_json("training", "runs", "get", run["id"])
    assert got["state"] == "SUCCEEDED", got
    assert got["recipe"]["computationIdentity"] == direct.identity == got["configHash"]
    final = Path(got["recipe"]["final"])
    assert final == tmp_path / "work" / run["id"] / "out" / "final"
    assert (final / "minifield.json").exists()
    assert json.loads((final / "minifield.json").read_text())["computation_identity"] == (
        direct.identity
    )
    steps = events(final.parent)
    metrics = demo.cli_json("training", "runs", "metrics", run["id"])["metrics"]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert [m["loss"] for m in metrics] == [e["loss"] for e in steps]
    assert [m["supervisedTokens"] for m in metrics] == [e["supervised_tokens"] for e in steps]
    assert got["results"]["finalLoss"] == steps[-1]["loss"]
    text = demo.service.cli("training", "runs", "get", run["id"], check=True, env=demo.env())
    text = text.stdout
    assert "packed-sft 12.0.0 (hf-causal-lm-v1)" in text and direct.identity in text


def test_a_worker_of_other_computations_leaves_the_run_queued(demo, tmp_path, tiny_model_dir):
    run = demo.submit(write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=1)))
    idle = demo.supervise(
        tmp_path / "work", "--accept", "13.0.0", "--accept", "two-stage", "--wait", "1"
    )
    assert idle.returncode == 0, idle.stderr
    assert "accepting 11.0.0 (hf-causal-lm-v1), 13.0.0 (hf-causal-lm-v1)" in idle.stdout
    assert "no recipe job to claim within 1 s" in idle.stdout
    got = demo.cli_json("training", "runs", "get", run["id"])
    assert got["state"] == "QUEUED" and got["startedAt"] is None
    capacity = demo.api("GET", "/v1/training/capacity").json()
    queued = [w["id"] for p in capacity["projects"] for w in p["waiting"] + p["holding"]]
    assert run["id"] not in queued  # a recipe run claims no pool devices nor quota
    assert not (tmp_path / "work" / run["id"]).exists()


def test_a_bad_recipe_is_refused_naming_the_field(demo, tmp_path, tiny_model_dir):
    doc = recipe_doc(tiny_model_dir, training={"sequence_length": 1})
    doc["data"]["path"] = str(tmp_path / "data.jsonl")
    r = demo.api("POST", "/v1/training/recipes", json={"project": demo.name, "recipe": doc})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["field"] == "training.sequence_length"
    assert err["message"] == "training.sequence_length must be at least 2, not 1."
    relative = recipe_doc(tiny_model_dir)
    r = demo.api("POST", "/v1/training/recipes", json={"project": demo.name, "recipe": relative})
    assert r.status_code == 400 and r.json()["error"]["field"] == "data.path", r.text
    path = write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, version="9.9.9"))
    out = demo.service.cli(
        "training", "recipes", "submit", str(path), "--project", demo.name, env=demo.env()
    )
    assert (
        out.returncode == 1 and "No installed strategy takes schema_version '9.9.9'" in out.stderr
    )
    assert demo.cli_json("training", "runs", "list")["runs"] == []  # this project's


def test_racing_claims_take_each_run_once(demo, tmp_path, tiny_model_dir):
    path = write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=1))
    runs = {demo.submit(path)["id"], demo.submit(path)["id"]}
    answers: list[Any] = []
    gate = threading.Barrier(4)

    def claim() -> None:
        gate.wait()
        body = {"accepts": [PACKED], "wait": 1, "worker": threading.current_thread().name}
        answers.append(demo.api("POST", "/v1/training/recipes/claim", json=body))

    threads = [threading.Thread(target=claim, name=f"w{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [a.status_code for a in answers] == [200] * 4
    claimed = [a.json()["job"] for a in answers if a.json()["job"] is not None]
    assert len(claimed) == 2
    assert {c["run"] for c in claimed} == runs and all(c["attempt"] == 1 for c in claimed)
    for c in claimed:
        got = demo.cli_json("training", "runs", "get", c["run"])
        assert got["state"] == "RUNNING" and got["recipe"]["worker"] in {"w0", "w1", "w2", "w3"}
        # the attempt's token posts that run's events only
        ev = httpx.post(
            demo.service.url + c["eventsPath"],
            json={"type": "metrics", "step": 1, "loss": 2.5},
            headers={"Authorization": f"Bearer {c['token']}"},
        )
        assert ev.status_code == 200 and ev.json()["control"] is None, ev.text
    first = claimed[0]
    cancelled = demo.cli_json("training", "runs", "cancel", first["run"])
    assert cancelled["state"] == "CANCELLED"  # at once: the service cannot see the worker
    ev = httpx.post(
        demo.service.url + first["eventsPath"],
        json={"type": "metrics", "step": 2, "loss": 2.0},
        headers={"Authorization": f"Bearer {first['token']}"},
    )
    assert ev.json()["control"] == "cancel", ev.text  # its worker is told to stop
    metrics = demo.cli_json("training", "runs", "metrics", first["run"])["metrics"]
    assert [(m["step"], m["loss"]) for m in metrics] == [(1, 2.5)]


def test_files_changed_after_submission_fail_the_run_naming_them(demo, tmp_path, tiny_model_dir):
    path = write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=1))
    run = demo.submit(path)
    with (tmp_path / "r" / "data.jsonl").open("a") as f:
        f.write(
            json.dumps(
                {
                    "messages": [{"role": "user", "content": "x"}],
                    "action": {"name": "get_time", "arguments": {"city": "Oslo"}},
                }
            )
            + "\n"
        )
    done = demo.supervise(tmp_path / "work")
    assert done.returncode == 1, done.stdout + done.stderr
    got = demo.cli_json("training", "runs", "get", run["id"])
    assert got["state"] == "FAILED"
    assert "data.sha256 changed since it was submitted" in got["failure"], got["failure"]


def test_a_paused_recipe_run_resumes_as_a_new_attempt(demo, tmp_path, tiny_model_dir):
    path = write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=2))
    run = demo.submit(path)
    first = demo.api("POST", "/v1/training/recipes/claim", json={"accepts": [PACKED]}).json()["job"]
    assert first["run"] == run["id"] and first["recipe"]["data"]["path"].startswith("/")

    def post(event: dict[str, Any]) -> dict[str, Any]:
        auth = {"Authorization": f"Bearer {first['token']}"}
        r = httpx.post(demo.service.url + first["eventsPath"], json=event, headers=auth)
        assert r.status_code == 200, r.text
        return r.json()

    assert post({"type": "metrics", "step": 1, "loss": 9.5})["control"] is None
    assert demo.cli_json("training", "runs", "pause", run["id"])["state"] == "RUNNING"
    assert post({"type": "metrics", "step": 2, "loss": 9.0})["control"] == "pause"
    post({"type": "paused"})
    assert demo.cli_json("training", "runs", "get", run["id"])["state"] == "PAUSED"
    resumed = demo.cli_json("training", "runs", "resume", run["id"])
    assert resumed["state"] == "QUEUED"
    assert resumed["queueReason"] == "waiting for a worker to claim it"

    done = demo.supervise(tmp_path / "work")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"claimed run {run['id']} attempt 2" in done.stdout
    got = demo.cli_json("training", "runs", "get", run["id"])
    assert got["state"] == "SUCCEEDED"
    metrics = demo.cli_json("training", "runs", "metrics", run["id"])["metrics"]
    steps = events(tmp_path / "work" / run["id"] / "out")
    assert [(m["attempt"], m["loss"]) for m in metrics] == [(2, e["loss"]) for e in steps]


class FakeEvents:
    """Stands in for the service's event route: records events, answers ``control``."""

    def __init__(self, control: str | None) -> None:
        self.control = control
        self.sent: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)


STEP = {
    "event": "step",
    "step": 3,
    "loss": 1.25,
    "grad_norm": 0.5,
    "update_norm": 0.01,
    "input_tokens": 40,
    "supervised_tokens": 12,
    "step_time_s": 0.2,
    "learning_rate": 0.01,
}


def test_forward_posts_metrics_by_their_api_names_and_stops_when_asked():
    from akka_optimize.minifield.supervise import Forward, Stopped

    lines: list[str] = []
    fake = FakeEvents(None)
    Forward(fake, lines.append)(STEP)  # type: ignore[arg-type]
    assert fake.sent == [
        {"type": "metrics", "step": 3, "loss": 1.25, "learningRate": 0.01, "gradNorm": 0.5,
         "updateNorm": 0.01, "supervisedTokens": 12, "totalTokens": 40, "stepTimeSeconds": 0.2}
    ]  # fmt: skip
    assert lines[0].startswith("step 3: loss 1.2500")
    for control in ("pause", "cancel"):
        with pytest.raises(Stopped) as stop:
            Forward(FakeEvents(control), lines.append)(STEP)  # type: ignore[arg-type]
        assert stop.value.control == control


@pytest.fixture(scope="module")
def quick_deadline(tmp_path_factory, tiny_model_dir) -> Iterator[LiveService]:
    """A service whose recipe runs fail after 3 s without an event
    (``service.recipeHeartbeatSeconds``; the shipped default is 300)."""
    roots = _roots(tmp_path_factory, tiny_model_dir)
    yield from _service(tmp_path_factory.mktemp("deadline"), roots, heartbeat_s=3)


def _claimed(demo: Project, tmp_path: Path, tiny_model_dir: Path) -> dict[str, Any]:
    run = demo.submit(write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=1)))
    body = {"accepts": [PACKED], "wait": 5, "worker": "box-7"}
    job = demo.api("POST", "/v1/training/recipes/claim", json=body).json()["job"]
    assert job["run"] == run["id"] and job["heartbeatSeconds"] == 3
    return job


def _wait_state(demo: Project, run_id: str, state: str) -> dict[str, Any]:
    for _ in range(600):  # bounded: the scheduler passes about once a second
        got = demo.cli_json("training", "runs", "get", run_id)
        if got["state"] == state:
            return got
        threading.Event().wait(0.1)
    raise AssertionError(f"run {run_id} never reached {state}: {got['state']}")


def test_a_run_whose_worker_goes_silent_fails_naming_the_deadline(
    quick_deadline, tmp_path, tiny_model_dir
):
    quick_deadline.cli("training", "projects", "create", "silent", check=True)
    demo = Project(quick_deadline, "silent", quick_deadline.create_token("silent"))
    job = _claimed(demo, tmp_path, tiny_model_dir)  # then the worker dies: no event at all
    got = _wait_state(demo, job["run"], "FAILED")
    assert got["failure"] == (
        "The minifield-worker that claimed it (box-7) sent no event for 3 s "
        "(service.recipeHeartbeatSeconds): its process or machine is gone. Resume it with "
        f"`training runs resume {job['run']}`."
    )
    late = httpx.post(
        quick_deadline.url + job["eventsPath"],
        json={"type": "metrics", "step": 1, "loss": 2.0},
        headers={"Authorization": f"Bearer {job['token']}"},
    )
    assert late.json()["control"] == "cancel"  # a worker that comes back is told to stop
    assert demo.cli_json("training", "runs", "metrics", job["run"])["metrics"] == []
    again = demo.cli_json("training", "runs", "resume", job["run"])
    assert again["state"] == "QUEUED"  # a worker may claim it again


def test_heartbeats_keep_a_busy_worker_s_run_alive(quick_deadline, tmp_path, tiny_model_dir):
    quick_deadline.cli("training", "projects", "create", "busy", check=True)
    demo = Project(quick_deadline, "busy", quick_deadline.create_token("busy"))
    job = _claimed(demo, tmp_path, tiny_model_dir)
    spec = Attempt(job["run"], job["attempt"], quick_deadline.url, job["token"])
    beat = Heartbeat(EventClient(spec), job["heartbeatSeconds"] / 4).start()
    try:
        for _ in range(1200):  # twice the deadline's worth of beats, bounded
            if beat.beats >= 8:
                break
            threading.Event().wait(0.05)
        assert beat.beats >= 8, f"only {beat.beats} heartbeats were sent"
        assert demo.cli_json("training", "runs", "get", job["run"])["state"] == "RUNNING"
    finally:
        beat.stop()
    got = _wait_state(demo, job["run"], "FAILED")  # beats stopped: the deadline applies
    assert "sent no event for 3 s" in got["failure"]
