"""The readable-storage guard (issue 19 item 3; FEATURES F019): a run, a pipeline, a
curation or an evaluation whose dataset or bundle lies where the training jobs cannot
read is refused at submit, before a device is claimed, and the reason names the part of
the location that did not match."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml
from jobs_helpers import TINY, gsm8k_rows

from akka_optimize.jobs.readable import mismatch, unreadable
from helpers import LiveService, free_port


@pytest.mark.parametrize(
    ("location", "grant", "part"),
    [
        ("s3://data/akka/sha256/ab/x", "s3://data/akka", None),
        ("s3://data/akka/sha256/ab/x", "s3://data", None),
        ("s3://data/akka/sha256/ab/x", "gs://data/akka", "the scheme s3:// (granted: gs://)"),
        ("s3://data/akka/sha256/ab/x", "s3://other/akka", "the bucket 'data' (granted: 'other')"),
        ("s3://data/akka/sha256/ab/x", "s3://data/akka-jobs",
         "the prefix 'akka' (granted: 'akka-jobs')"),
        ("/home/svc/blobs/sha256/ab/x", "/data/blobs", "the prefix 'home' (granted: 'data/blobs')"),
        ("/srv/blobs/sha256/ab/x", "file:///srv/blobs", None),
    ],
)  # fmt: skip
def test_a_location_matches_a_grant_part_by_part(location, grant, part) -> None:
    got = mismatch(location, grant)
    assert (got[1] if got else None) == part


def test_the_grant_that_matched_most_names_the_part() -> None:
    grants = ["gs://data/akka", "s3://data/jobs"]
    assert unreadable(grants, "s3://data/akka/x") == "the prefix 'akka' (granted: 'jobs')"
    assert unreadable(None, "s3://anything/x") is None  # the service's own store
    assert unreadable(grants + ["s3://data/akka"], "s3://data/akka/x") is None


def test_work_on_unreadable_storage_is_refused_at_submit_naming_the_part(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw["jobStorage"] = {"readable": ["s3://training-data/akka"]}
    (home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    svc = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    try:
        svc.cli("training", "projects", "create", "demo", check=True)
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        data = gsm8k_rows(tmp_path / "train.jsonl", 4, system="Answer with #### N.")
        svc.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)
        plan = {"kind": "run", "project": "demo", "baseModel": TINY,
                "config": {"method": "sft", "dataset": "demo/train"}}  # fmt: skip

        def refused(r, field: str) -> None:
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["field"] == field and err["code"] == "storage_unreadable", err
            assert "the scheme file:// (granted: s3://)" in err["message"], err
            assert str(home / "blobs") in err["message"]

        dry = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan).json()
        assert dry["accepted"] is False
        assert dry["refusals"][0]["code"] == "storage_unreadable"
        refused(svc.api("POST", "/v1/training/runs", json=plan), "config.dataset")
        ev = {"modelId": TINY, "project": "demo", "dataset": "demo/train",
              "grader": f"model:{TINY}"}  # fmt: skip
        refused(svc.api("POST", "/v1/training/evaluations", json=ev), "dataset")
        cu = {"project": "demo", "source": "demo/train", "judge": f"model:{TINY}",
              "keep": {"minScore": 0.5}, "dataset": "demo/curated"}  # fmt: skip
        refused(svc.api("POST", "/v1/training/curations", json=cu), "source")
        stage = {k: v for k, v in plan.items() if k not in ("kind", "project")}
        pipe = {"kind": "pipeline", "project": "demo", "stages": [{"kind": "train", **stage}]}
        refused(svc.api("POST", "/v1/training/pipelines", json=pipe), "stages[0].config.dataset")
        # nothing was created, and no device is held
        for route, key in (("runs", "runs"), ("evaluations", "evaluations"),
                           ("curations", "curations"), ("pipelines", "pipelines")):  # fmt: skip
            assert svc.api("GET", f"/v1/training/{route}").json()[key] == [], route
        cap = svc.api("GET", "/v1/training/capacity").json()
        assert [p["inUse"] for p in cap["pools"]] == [0] * len(cap["pools"]), cap
        assert all(not p["holding"] and not p["waiting"] for p in cap["projects"]), cap
    finally:
        svc.stop()
