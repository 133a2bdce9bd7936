"""The second pass really runs on the cluster's stores (issue 25 item 4, tests/cluster_stores.py).

In the PostgreSQL + S3 pass a service keeps nothing in its home: no ``state.db``, no
``blobs/``; its rows are in its own PostgreSQL database and a registered dataset's bytes are
an object under its prefix in the S3 bucket. In the first pass the same service keeps both
in its home. Either way the check can fail: a pass that quietly fell back to SQLite, or a
first pass that wrote elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx

import cluster_stores
from helpers import LiveService, gsm8k_rows


def _s3_keys(env: dict[str, str], prefix: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(
        key=env["AWS_ACCESS_KEY_ID"],
        secret=env["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]},
    )
    return fs.find(prefix)


def test_a_service_keeps_state_and_blobs_where_the_pass_says(
    service: LiveService, tmp_path: Path
) -> None:
    service.cli("training", "projects", "create", "demo", check=True)
    rows = gsm8k_rows(tmp_path / "rows.jsonl", 3)
    service.cli("registry", "datasets", "register", "demo/rows", "-f", str(rows), check=True)
    answer = service.api("GET", "/v1/registry/datasets/demo/rows/versions")
    assert answer.status_code == 200, answer.text
    assert "v1" in json.dumps(answer.json())
    if not cluster_stores.enabled():
        assert (service.home / "state.db").exists()
        assert any((service.home / "blobs").rglob("*"))
        return
    env = cluster_stores.store_env(service.home)
    assert env["AKKA_OPTIMIZE_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert not (service.home / "state.db").exists()
    assert not (service.home / "blobs").exists()
    prefix = env["AKKA_OPTIMIZE_BLOBS_URL"].removeprefix("s3://")
    keys = _s3_keys(env, prefix)
    digest = hashlib.sha256(rows.read_bytes()).hexdigest()
    blob = f"{prefix}/sha256/{digest[:2]}/{digest}"
    assert blob in keys, f"the uploaded rows are not at s3://{blob}: {keys}"
    httpx.get(service.url + "/healthz", timeout=5).raise_for_status()
