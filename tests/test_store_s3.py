"""Blobs in S3 for real (issue 25 item 3): an S3-compatible HTTP server started by the tests.

``moto_server`` (PyPI ``moto[server]``) answers the S3 API on a loopback port; the blob store
reaches it through the same fsspec URL a cluster sets (``AKKA_OPTIMIZE_BLOBS_URL=
s3://bucket/prefix``) and the usual AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``). Covered: content
addressing, "visible only once complete" (a writer killed mid-upload leaves no object at
its key, and the service start sweeps what it left), and a service whose blobs are in S3
registering a dataset, training a run that reads it and writes its saves, registering the
adapter and serving it from an endpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import httpx
import pytest

from helpers import BIN, LiveService, free_port
from jobs.jobs_helpers import setup_project, write_plan

BUCKET = "akka-blobs"


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A running ``moto_server`` with bucket ``akka-blobs``; yields the AWS variables."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "ab")
    proc = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "moto_server exited"
            try:
                httpx.get(env["AWS_ENDPOINT_URL"], timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "moto_server did not answer within 60 s"
                time.sleep(0.1)
        assert httpx.put(f"{env['AWS_ENDPOINT_URL']}/{BUCKET}", timeout=10).status_code == 200
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


@pytest.fixture
def s3_store(s3_env, monkeypatch, request):
    from akka_optimize.store import BlobStore

    for k, v in s3_env.items():
        monkeypatch.setenv(k, v)
    return BlobStore(f"s3://{BUCKET}/{request.node.name}")


def test_content_addressed_blobs_round_trip_through_s3(s3_store) -> None:
    data = b"rows\n" * 1000
    digest, size = s3_store.put_stream_content_addressed(iter([data[:7], data[7:]]))
    hexd = hashlib.sha256(data).hexdigest()
    assert (digest, size) == (f"sha256:{hexd}", len(data))
    key = f"sha256/{hexd[:2]}/{hexd}"
    assert s3_store.exists(key) and s3_store.get_bytes(key) == data
    # the same content again is the same key, stored once, and leaves no temporary object
    assert s3_store.put_stream_content_addressed([data]) == (digest, size)
    assert s3_store.list("") == [key]
    assert s3_store.list(".tmp") == [] and s3_store.sweep_tmp() == 0
    s3_store.put_bytes("runs/r1/state/step-1/adapter.safetensors", b"w")
    s3_store.copy_prefix("runs/r1", "runs/r2")
    assert s3_store.list("runs") == [
        "runs/r1/state/step-1/adapter.safetensors",
        "runs/r2/state/step-1/adapter.safetensors",
    ]
    s3_store.delete("runs/r1")
    assert s3_store.list("runs/r1") == [] and s3_store.exists(
        "runs/r2/state/step-1/adapter.safetensors"
    )


def test_a_writer_that_fails_or_is_killed_leaves_nothing_at_its_key(s3_store, s3_env) -> None:
    with pytest.raises(RuntimeError, match="disk full"):
        with s3_store.writer("datasets/a.jsonl") as f:
            f.write(b"x" * 10)
            raise RuntimeError("disk full")
    assert not s3_store.exists("datasets/a.jsonl") and s3_store.list(".tmp") == []

    # a process killed mid-upload, with its first part flushed to S3
    script = textwrap.dedent(
        f"""
        import os
        from akka_optimize.store import BlobStore
        s = BlobStore({s3_store.url!r})
        with s.writer("datasets/b.jsonl") as f:
            f.write(b"y" * (6 << 20))  # past s3fs's 5 MiB block: a part is uploaded
            print("written", flush=True)
            os.kill(os.getpid(), 9)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **s3_env}, capture_output=True, text=True
    )
    assert out.returncode == -9 and "written" in out.stdout, out.stderr
    assert not s3_store.exists("datasets/b.jsonl")
    assert s3_store.list("datasets") == []
    s3_store.sweep_tmp()  # what a service start does; nothing a version names was there
    assert s3_store.list(".tmp") == []


def test_a_service_with_its_blobs_in_s3_trains_registers_and_serves(s3_env, tmp_path) -> None:
    from akka_optimize.store import BlobStore

    url = f"s3://{BUCKET}/service"
    svc = LiveService(
        home=tmp_path / "home",
        config_dir=tmp_path / "config",
        port=free_port(),
        extra_env={**s3_env, "AKKA_OPTIMIZE_BLOBS_URL": url},
    )
    svc.start()
    try:
        info = json.loads(svc.cli("training", "info", "-o", "json", check=True).stdout)
        assert info["blobStore"]["url"] == url, info
        setup_project(svc, tmp_path, rows=4)
        plan = write_plan(tmp_path / "plan.json", epochs=1, execution={"saveEverySteps": 1})
        out = svc.cli("training", "runs", "start", "-f", str(plan), "--wait", "-o", "json",
                      check=True)  # fmt: skip
        run = json.loads(out.stdout[out.stdout.index("{") :])
        assert run["state"] == "SUCCEEDED", run
        model = run["results"]["model"]
        assert model.startswith("demo/")

        for k, v in s3_env.items():
            os.environ[k] = v
        store = BlobStore(url)
        keys = store.list("")
        assert not any(k.startswith(".tmp/") for k in keys)
        # the run's saves and the registered adapter are objects in the bucket, not files
        assert any(k.startswith(f"runs/{run['id']}/") for k in keys), keys
        assert not (svc.home / "blobs").exists()

        out = svc.cli("training", "endpoints", "create", "--model", model.split("@")[0],
                      "--wait", "-o", "json", check=True)  # fmt: skip
        ep = json.loads(out.stdout[out.stdout.index("{") :])
        assert ep["state"] == "READY", ep
        r = svc.api(
            "POST",
            f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
            json={"model": model.split("@")[0], "temperature": 0, "max_tokens": 4,
                  "messages": [{"role": "user", "content": "What is 2 + 2?"}]},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] is not None
    finally:
        svc.stop()
        for k in s3_env:
            os.environ.pop(k, None)
