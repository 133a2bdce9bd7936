"""Capacity (issue 22): pools, quotas, claims, queue positions and reasons, decided by
:mod:`akka_optimize.jobs.capacity.usage` over real run and endpoint records (SQLite, migrated).
The live flow through the scheduler is in test_jobs_capacity_live.py."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest

from akka_optimize.db.base import Database
from akka_optimize.db.migrate import upgrade
from akka_optimize.db.models.jobs import Run
from akka_optimize.db.models.projects import Project
from akka_optimize.db.models.serving import Endpoint, EndpointModel
from akka_optimize.deployment import DEFAULT_FILE, Deployment, load_deployment
from akka_optimize.errors import InvalidRequest
from akka_optimize.jobs.capacity import usage as capacity
from akka_optimize.service.schemas import CapacityReport
from answers_check import assert_matches

T0 = dt.datetime(2026, 12, 2, 1, 0, tzinfo=dt.UTC)


def _dep(tmp_path: Path, **extra: object) -> Deployment:
    """The shipped deployment with ``extra`` sections laid over it."""
    import yaml

    raw = yaml.safe_load(DEFAULT_FILE.read_text())
    raw.update(extra)
    path = tmp_path / f"deployment-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_deployment(path)


CPU2 = {"pools": [{"name": "cpu", "deviceProfile": "cpu", "devicesPerNode": 2}]}
QUOTAS = {"quotas": {"projects": {"a": {"cpu": 1}, "b": {"cpu": 1}}}}


@pytest.fixture
def db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    upgrade(url)
    database = Database(url)
    with database.session() as s:
        for name in ("a", "b", "c"):
            s.add(Project(id=f"p-{name}", name=name))
    yield database
    database.dispose()


def _run(s, project: str, minute: int, state: str = "QUEUED", **kw: object) -> Run:
    run = Run(
        id=kw.pop("id", f"{project}{minute:02d}" + uuid.uuid4().hex[:6]),
        project=project,
        method=kw.pop("method", "sft"),
        state=state,
        plan={},
        resolved=kw.pop("resolved", {"execution": {"deviceProfile": "cpu"}}),
        config_hash="0" * 64,
        base_model="tiny/base",
        dataset="demo/train:v1",
        model_name="m",
        device_kind="cpu",
        gpus=0,
        created_at=T0 + dt.timedelta(minutes=minute),
        **kw,
    )
    s.add(run)
    s.flush()
    return run


def _endpoint(s, project: str, minute: int, state: str, pinned: str = "tiny/base:v1@x") -> str:
    ep = Endpoint(
        id=f"ep{project}{minute:02d}",
        project_id=f"p-{project}",
        state=state,
        base_model="tiny/base",
        queued_at=T0 + dt.timedelta(minutes=minute),
    )
    s.add(ep)
    s.flush()
    s.add(EndpointModel(endpoint_id=ep.id, kind="base", ref=pinned, pinned=pinned, served_name="b"))
    s.flush()
    return ep.id


def _verdicts(s, dep) -> dict[str, capacity.Verdict]:
    return {v.claim.id: v for v in capacity.verdicts(s, dep)}


def test_a_changed_deployment_file_is_read_again(tmp_path) -> None:
    """The parsed file is cached per path and stat (every request reads it); a change
    that keeps the modification time (same second, copied with its time) is still seen."""
    import os

    import yaml

    def text(limit: int) -> str:
        raw = yaml.safe_load(DEFAULT_FILE.read_text())
        raw.setdefault("service", {})["jsonBodyBytes"] = limit
        return yaml.safe_dump(raw)

    path = tmp_path / "deployment.yaml"
    path.write_text(text(1000))
    assert load_deployment(path).service.jsonBodyBytes == 1000
    assert load_deployment(path) is load_deployment(path)  # unchanged: from the cache
    stamp = path.stat().st_mtime_ns
    path.write_text(text(20000))  # longer, same time
    os.utime(path, ns=(stamp, stamp))
    assert load_deployment(path).service.jsonBodyBytes == 20000
    other = tmp_path / "other.yaml"
    other.write_text(text(30000))
    os.utime(other, ns=(stamp, stamp))
    os.replace(other, path)  # replaced by another file: same size and time, new inode
    assert load_deployment(path).service.jsonBodyBytes == 30000
    path.unlink()
    with pytest.raises(InvalidRequest, match="Cannot read the deployment file"):
        load_deployment(path)


def test_the_deployment_declares_pools_and_quotas(tmp_path) -> None:
    dep = _dep(tmp_path, **CPU2, **QUOTAS)
    assert [(p.name, p.devicesPerNode, p.nodes) for p in dep.device_pools()] == [("cpu", 2, 1)]
    assert dep.quotas.of("a", "cpu") == 1 and dep.quotas.of("c", "cpu") is None
    shipped = load_deployment()  # no pools: one per device profile, named after it
    assert [p.name for p in shipped.device_pools()] == ["cpu", "H100", "H200"]
    with pytest.raises(InvalidRequest, match=r"quotas\.projects\.a\.gpu names no pool"):
        _dep(tmp_path, **CPU2, quotas={"projects": {"a": {"gpu": 1}}})
    with pytest.raises(InvalidRequest, match=r"pools\.0\.deviceProfile 'tpu'"):
        _dep(tmp_path, pools=[{"name": "x", "deviceProfile": "tpu"}])


def test_two_projects_with_quotas_of_one_and_three_runs(db, tmp_path) -> None:
    """a1 and b1 hold the pool's two devices; a2 waits for project a's quota, position 1;
    c1 (no quota) waits for the busy devices, which other projects hold: its reason names
    no run of theirs (issue 48 item 4). When a1 ends, a2 may start and c1 still waits."""
    dep = _dep(tmp_path, **CPU2, **QUOTAS)
    with db.session() as s:
        a1 = _run(s, "a", 1, "RUNNING")
        b1 = _run(s, "b", 2, "RUNNING")
        a2 = _run(s, "a", 3)
        c1 = _run(s, "c", 4)
        v = _verdicts(s, dep)
        assert (v[a2.id].position, v[a2.id].of) == (1, 2)
        assert v[a2.id].reason == (
            f"project a's quota in pool cpu is 1 device, 1 in use (by run {a1.id}); it needs 1"
        )
        assert v[a2.id].sentence().startswith("position 1 of 2 in pool cpu: project a's quota")
        assert v[c1.id].position == 2
        assert v[c1.id].reason == (
            "devices busy: pool cpu has 2 devices, 2 held by another project's run, another "
            "project's run; it needs 1"
        )
        assert b1.id not in v[c1.id].sentence() and a1.id not in v[c1.id].sentence()
        a1.state = "SUCCEEDED"
        s.flush()
        v = _verdicts(s, dep)
        assert v[a2.id].reason is None  # it starts now
        assert v[c1.id].reason.startswith("devices busy: pool cpu has 2 devices, 2 held by")


def test_work_held_back_by_busy_devices_holds_back_later_work(db, tmp_path) -> None:
    """Order of submission: a large claim waiting for devices is not overtaken by a small
    one behind it; one held back by its own project's quota is."""
    dep = _dep(tmp_path, **CPU2, **QUOTAS)
    with db.session() as s:
        _run(s, "c", 1, "RUNNING")
        big = _run(s, "c", 2, resolved={"execution": {"deviceProfile": "cpu"}}, id="big")
        big.gpus = 2  # two devices: waits for both
        small = _run(s, "b", 3)
        v = _verdicts(s, dep)
        assert v["big"].reason.startswith("devices busy")
        assert v[small.id].reason == (
            "earlier queued work: another project's run waits for pool cpu first"
        )
    with db.session() as s:  # a quota wait lets the next project's work pass
        a1 = _run(s, "a", 10, "RUNNING", id="a1")
        s.get(Run, "big").state = "CANCELLED"
        for r in s.query(Run).filter(Run.project == "c"):
            r.state = "SUCCEEDED"
        a2 = _run(s, "a", 11)
        b1 = s.get(Run, small.id)
        v = _verdicts(s, dep)
        assert v[a2.id].reason.startswith("project a's quota") and a1.id == "a1"
        assert v[b1.id].reason is None


def test_an_endpoint_holding_the_device_makes_a_run_wait(db, tmp_path) -> None:
    dep = _dep(tmp_path, serving={"claimDevices": 1})
    with db.session() as s:
        ep = _endpoint(s, "a", 1, "READY")
        run = _run(s, "b", 2)
        assert _verdicts(s, dep)[run.id].reason == (
            "devices busy: pool cpu has 1 device, 1 held by another project's endpoint; it needs 1"
        )
        s.get(Endpoint, ep).state = "STOPPED"  # idle-stopped: holds nothing
        s.flush()
        assert _verdicts(s, dep)[run.id].reason is None
    shipped = _dep(tmp_path)  # on a cpu pool an endpoint claims nothing unless told
    assert capacity.endpoint_devices(shipped) == 0


def test_a_queued_endpoint_waits_its_turn_and_starts_when_it_fits(db, tmp_path) -> None:
    dep = _dep(tmp_path, serving={"claimDevices": 1})
    with db.session() as s:
        run = _run(s, "a", 1, "RUNNING")
        ep = _endpoint(s, "b", 2, "QUEUED")
    assert capacity.endpoint_may_start(db, dep, ep) == (
        "position 1 of 1 in pool cpu: devices busy: pool cpu has 1 device, 1 held by another "
        "project's run; it needs 1"
    )
    with db.session() as s:
        assert s.get(Endpoint, ep).activity.startswith("queued: position 1 of 1 in pool cpu")
        s.get(Run, run.id).state = "SUCCEEDED"
    assert capacity.endpoint_may_start(db, dep, ep) is None
    with db.session() as s:
        assert s.get(Endpoint, ep).state == "STARTING"  # holds its claim from now on
        later, theirs = _run(s, "b", 3), _run(s, "a", 4)  # its own project's: named
        v = _verdicts(s, dep)
        assert v[later.id].reason.endswith(f"held by endpoint {ep}; it needs 1")
        assert (
            v[theirs.id].reason
            == "earlier queued work: another project's run waits for pool cpu first"
        )


def test_a_judged_run_claims_its_judge_endpoint_once(db, tmp_path) -> None:
    """Two claims: the training device and the judge endpoint. A quota of one refuses it
    (it could never start); the endpoint serving its judge counts inside its claim."""
    dep = _dep(tmp_path, **CPU2, **QUOTAS, serving={"claimDevices": 1})
    devices = capacity.run_devices(dep, "cpu", "cpu", 0, judged=True)
    assert devices == {"cpu": 2}
    refused = capacity.refusal(
        dep, "a", devices, capacity.claim_words(devices, True), "config.rlHyperparams.reward"
    )
    assert refused is not None and refused.code == "quota_exceeded"
    assert refused.message.startswith(
        "config.rlHyperparams.reward: this needs 2 cpu devices (its training devices and its "
        "judge endpoint), but project a's quota in pool cpu is 1 device, so it could never start"
    )
    assert capacity.refusal(dep, "c", devices, "", "x") is None  # c has no quota; pool holds 2
    judged = {"execution": {"deviceProfile": "cpu"}, "grader": {"judge": "tiny/base:v1@x"}}
    with db.session() as s:
        run = _run(s, "c", 1, "RUNNING", resolved=judged)
        ep = _endpoint(s, "c", 2, "READY", pinned="tiny/base:v1@x")
        held = capacity.holders(s, dep)
        assert [(c.id, c.devices) for c in held] == [(run.id, {"cpu": 2})]
        assert ep not in [c.id for c in held]
        rep = capacity.report(s, dep, "c")
        assert rep["pools"][0]["inUse"] == 2 and rep["pools"][0]["declared"] == 2


def test_the_report_groups_claims_under_projects(db, tmp_path) -> None:
    dep = _dep(tmp_path, **CPU2, **QUOTAS, serving={"claimDevices": 1})
    with db.session() as s:
        a1 = _run(s, "a", 1, "RUNNING")
        a2 = _run(s, "a", 2)
        ep = _endpoint(s, "b", 3, "READY")
        whole = capacity.report(s, dep)
        assert [p["projectName"] for p in whole["projects"]] == ["a", "b", "c"]
        a = capacity.report(s, dep, "a")
    for report in (whole, a):  # what GET /v1/training/capacity documents (issue 14 item 9)
        assert_matches(CapacityReport, report)
    assert a["pools"] == [
        {
            "name": "cpu",
            "deviceProfile": "cpu",
            "kind": "cpu",
            "nodes": 1,
            "devicesPerNode": 2,
            "declared": 2,
            "observed": 1,
            "inUse": 2,
            "waiting": 1,
        }
    ]
    (pa,) = a["projects"]
    assert (pa["projectId"], pa["projectName"], pa["usage"], pa["quota"]) == (
        "p-a",
        "a",
        {"cpu": 1},
        {"cpu": 1},
    )
    assert [(h["kind"], h["id"], h["devices"]) for h in pa["holding"]] == [
        ("run", a1.id, {"cpu": 1})
    ]
    (w,) = pa["waiting"]
    assert (w["id"], w["position"], w["of"], w["pool"]) == (a2.id, 1, 1, "cpu")
    assert w["reason"].startswith("project a's quota in pool cpu is 1 device, 1 in use")
    b = next(p for p in whole["projects"] if p["projectName"] == "b")
    assert [(h["kind"], h["id"]) for h in b["holding"]] == [("endpoint", ep)]
