"""``server start --workers N`` (issue 49 item 6): API processes over one store, one
controller process, SQLite writers of several processes taking turns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import forked_cli
from helpers import BIN, LiveService, base_env, free_port

REGISTER = """
import sys, time
from pathlib import Path
from akka_optimize.db import Database
from akka_optimize.refs import Ref
from akka_optimize.registry.core import register_version

url, go, who, count = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
db = Database(url)
for _ in range(2000):  # every process starts writing together (bounded: 2000 x 5 ms)
    if go.exists():
        break
    time.sleep(0.005)
for i in range(count):
    with db.session() as s:
        register_version(s, "model", Ref("team", "shared"), f"sha256:{who}-{i:04d}")
db.dispose()
"""


def _versions(url: str) -> list[tuple[int, str]]:
    from sqlalchemy import select

    from akka_optimize.db import Database
    from akka_optimize.db.models.registry import RegistryName, RegistryVersion

    db = Database(url)
    try:
        with db.session() as s:
            q = select(RegistryVersion.version, RegistryVersion.digest).join(
                RegistryName, RegistryName.id == RegistryVersion.name_id
            )
            return sorted(s.execute(q.where(RegistryName.name == "shared")).tuples().all())
    finally:
        db.dispose()


def test_versions_registered_by_several_processes_are_consecutive(tmp_path: Path) -> None:
    from akka_optimize.db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'state.db'}"
    upgrade(url)
    go, procs, count = tmp_path / "go", 3, 12
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", REGISTER, url, str(go), f"p{k}", str(count)], env=env
        )  # fmt: skip
        for k in range(procs)
    ]
    go.touch()
    assert [w.wait(timeout=300) for w in writers] == [0] * procs
    rows = _versions(url)
    # every registration made exactly one version, numbered 1..n without a gap or a repeat
    assert [v for v, _ in rows] == list(range(1, procs * count + 1))
    assert sorted(d for _, d in rows) == sorted(
        f"sha256:p{k}-{i:04d}" for k in range(procs) for i in range(count)
    )


def _pids(home: Path) -> dict:
    try:
        return json.loads((home / "server.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> LiveService:
    d = tmp_path_factory.mktemp("workers")
    svc = LiveService(home=d / "home", config_dir=d / "config", port=free_port(), workers=2)
    with svc.running():
        yield svc


def test_two_workers_share_the_store_and_forward_the_controller_routes(two_workers) -> None:
    svc = two_workers
    pids = _pids(svc.home)
    assert len(pids["workers"]) == 2 and pids["controllerStarts"] == 1
    assert all(_alive(p) for p in [pids["controller"], *pids["workers"]])
    # endpoints live in the controller: the worker forwards, the caller sees one service
    assert svc.api("GET", "/v1/training/endpoints").json() == {"endpoints": []}
    missing = svc.api("GET", "/v1/training/endpoints/ep-none")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert svc.api("GET", "/v1/training/endpoints").status_code == 200

    def register(i: int) -> dict:
        row = json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                       {"role": "assistant", "content": f"a{i}"}]})  # fmt: skip
        r = svc.api("POST", "/v1/registry/datasets/team/rows", content=row + "\n")
        assert r.status_code == 201, r.text
        return r.json()

    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(register, range(24)))
    listed = svc.api("GET", "/v1/registry/datasets/team/rows/versions", params={"limit": 100})
    items = listed.json()["items"]
    assert sorted(int(v["version"].removeprefix("v")) for v in items) == list(range(1, 25))
    assert sorted(v["digest"] for v in items) == sorted(m["digest"] for m in made)


def test_controller_comes_back_and_its_scheduler_picks_up_a_queued_run(two_workers) -> None:
    from akka_optimize.db import Database
    from akka_optimize.db.models.jobs import Run

    svc = two_workers
    before = _pids(svc.home)
    os.kill(before["controller"], signal.SIGKILL)
    for _ in range(600):  # bounded: the supervisor notices within its 0.2 s poll
        now = _pids(svc.home)
        if now.get("controllerStarts") == 2 and _alive(now["controller"]):
            break
        time.sleep(0.05)
    assert now["controllerStarts"] == 2 and now["controller"] != before["controller"]
    assert now["workers"] == before["workers"]  # the API workers kept running
    # A queued run asking for devices no pool has: only the scheduler (in the controller)
    # acts on it, failing it with the pool refusal.
    db = Database(f"sqlite:///{svc.home / 'state.db'}")
    try:
        with db.session() as s:
            s.add(Run(id="r-after-restart", project="p", method="sft", state="QUEUED", plan={},
                      resolved={}, config_hash="x", base_model="b", dataset="d",
                      model_name="m", device_kind="tpu", gpus=1))  # fmt: skip
    finally:
        db.dispose()
    for _ in range(3000):  # bounded loop on the run's state, not a wall-clock wait
        run = svc.api("GET", "/v1/training/runs/r-after-restart").json()
        if run.get("state") != "QUEUED":
            break
        time.sleep(0.05)
    assert run["state"] == "FAILED"
    assert "No device pool serves tpu devices" in run["failure"]


@pytest.mark.parametrize(
    ("path", "forwarded"),
    [
        ("/api/v1/create_model", True),  # Tinker: the broker is one process's
        ("/v1/training/runs/r1/attempts/2/tinker/next", True),
        ("/v1/training/runs/r1/attempts/2/judge/chat/completions", True),
        ("/v1/training/endpoints", True),  # endpoint workers' handles
        ("/v1/training/endpoints/e1/openai/v1/chat/completions", True),
        ("/v1/chat/completions", True),
        ("/v1/fine_tuning/alpha/graders/run", True),
        ("/v1/training/base-models", True),  # fetch subprocesses
        ("/v1/training/info", True),  # the controller's start-up
        ("/v1/training/runs", False),  # rows of the store: any worker
        ("/v1/training/runs/r1/pause", False),
        ("/v1/registry/datasets/team/rows", False),
        ("/v1/training/endpointsx", False),
        ("/healthz", False),
    ],
)
def test_which_routes_go_to_the_controller(path: str, forwarded: bool) -> None:
    from akka_optimize.service.controller_proxy import needs_controller

    assert needs_controller(path) is forwarded


def test_an_api_process_needs_the_controller_address(tmp_path: Path) -> None:
    from akka_optimize.service import create_app
    from akka_optimize.settings import Settings

    settings = Settings(home=tmp_path)
    with pytest.raises(ValueError, match="controller_url"):
        create_app(settings, role="api")
    with pytest.raises(ValueError, match="role: 'worker'"):
        create_app(settings, role="worker")


def test_a_writer_of_another_process_holding_the_gate_times_out_named(tmp_path: Path) -> None:
    import fcntl

    from sqlalchemy.exc import OperationalError

    from akka_optimize.db.base import WriteGate, writers_lock_path

    path = writers_lock_path(f"sqlite:///{tmp_path / 'state.db'}")
    assert path == str(tmp_path / "state.db-writers")
    assert writers_lock_path("sqlite:///:memory:") is None
    assert writers_lock_path("postgresql+psycopg://h/db") is None
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # another open file: another writer
    fcntl.flock(other, fcntl.LOCK_EX)
    gate = WriteGate(timeout=0.05, lock_path=path)
    with pytest.raises(OperationalError, match="a writer of another process held it"):
        gate.enter(1)
    fcntl.flock(other, fcntl.LOCK_UN)
    gate.enter(1)  # free now: taken at once, and given back on leave
    gate.leave(1)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(other)


def test_zero_workers_is_refused_naming_the_flag(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home", tmp_path / "config")
    cmd = [str(BIN / "akka-optimize"), "server", "start", "--workers", "0"]
    out = forked_cli.run(cmd, env, timeout=120)
    assert out.returncode == 2
    assert "--workers: 0 is not a process count" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_forwarded_write_keeps_its_body_query_and_the_controllers_answer(two_workers) -> None:
    r = two_workers.api("POST", "/v1/training/endpoints", params={"dryRun": "true"},
                        json={"model": "team/none:v1", "project": "nowhere"})  # fmt: skip
    err = r.json()["error"]
    # the controller's own refusal, in the API's shape, passed back unchanged
    assert r.status_code == 404, r.text
    assert err == {
        "code": "not_found",
        "message": "No training project 'nowhere'; create it with `training projects create NAME`.",
        "field": "project",
    }


def test_an_unreachable_controller_is_answered_503_with_retry_after() -> None:
    import asyncio

    import httpx

    from akka_optimize.service.controller_proxy import ControllerProxy

    async def never(scope, receive, send) -> None:  # the worker's own app: not reached
        raise AssertionError(scope["path"])

    async def ask() -> httpx.Response:
        proxy = ControllerProxy(never, url=f"http://127.0.0.1:{free_port()}")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=proxy), base_url="http://svc"
        ) as http:
            return await http.get("/v1/training/endpoints")

    r = asyncio.run(ask())
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert r.json()["error"]["code"] == "unavailable"
    assert "controller process did not answer" in r.json()["error"]["message"]


COUNT = "akka_optimize_http_request_duration_seconds_count"


def _scrape(svc: LiveService) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``, parsed by prometheus-client's parser; each sample
    (name and labels) and each family once."""
    from prometheus_client.parser import text_string_to_metric_families

    r = svc.api("GET", "/metrics")
    assert r.status_code == 200, r.text
    families = list(text_string_to_metric_families(r.text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    keys = [(s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples]
    samples = {(n, ls): v for n, ls, v in keys}
    assert len(samples) == len(keys), "a sample appears twice"
    return samples


def _answered(samples: dict, route: str) -> float:
    return samples.get((COUNT, (("method", "GET"), ("route", route), ("status", "200"))), 0.0)


def _answered_by(svc: LiveService, pid: int, route: str, tmp: Path) -> float:
    """The GET ``route`` answers process ``pid`` timed: its own file of the service's
    multiprocess folder, read alone."""
    import shutil

    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    own = svc.home / "metrics-multiproc" / f"histogram_{pid}.db"
    if not own.exists():
        return 0.0
    alone = tmp / str(pid)
    shutil.rmtree(alone, ignore_errors=True)
    alone.mkdir()
    shutil.copy(own, alone)
    reg = CollectorRegistry()
    MultiProcessCollector(reg, path=str(alone))
    return reg.get_sample_value(COUNT, {"method": "GET", "route": route, "status": "200"}) or 0.0


def test_metrics_sum_every_process_whichever_api_process_answers(
    two_workers: LiveService, tmp_path: Path
) -> None:
    svc = two_workers
    workers = _pids(svc.home)["workers"]
    listed, forwarded = "/v1/training/projects", "/v1/training/endpoints"
    before = _scrape(svc)
    made = 0
    for _ in range(50):  # bounded: batches until each API process has answered some
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda _: svc.api("GET", listed).status_code, range(8)))
        assert codes == [200] * 8
        made += 8
        if all(_answered_by(svc, p, listed, tmp_path) > 0 for p in workers):
            break
    for _ in range(5):  # answered by the controller (the API process forwards it)
        assert svc.api("GET", forwarded).status_code == 200
    first, second = _scrape(svc), _scrape(svc)

    own = [_answered_by(svc, p, listed, tmp_path) for p in workers]
    assert all(n > 0 for n in own), own  # both API processes answered the route...
    for scrape in (first, second):  # ...and either one's /metrics sums both, and only once
        assert _answered(scrape, listed) == _answered(before, listed) + made == sum(own)
        # the controller's count: what it answered for the API processes, counted by it alone
        assert _answered(scrape, forwarded) == _answered(before, forwarded) + 5
        assert ("akka_optimize_pool_devices", (("pool", "cpu"),)) in scrape  # the store's
    assert all(_answered_by(svc, p, forwarded, tmp_path) == 0 for p in workers)
