"""A service killed (SIGKILL) in the middle of a large upload leaves no version and no
readable partial blob; after a restart the next registration succeeds (issue 3 "Checks")."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
from registry_testkit import row

from akka_optimize.store import BlobStore
from helpers import LiveService, free_port


def test_sigkill_mid_upload_leaves_nothing_and_the_next_registration_succeeds(tmp_path: Path):
    svc = LiveService(home=tmp_path / "home", config_dir=tmp_path / "cfg", port=free_port())
    svc.start()
    line = (json.dumps(row("x" * 1000)) + "\n").encode()
    chunk = line * 1000  # about 1 MiB
    release = threading.Event()

    def body():
        for i in range(64):
            yield chunk
            if i == 4:
                release.wait(30)  # hold the upload open, half sent, until the kill

    errors: list[BaseException] = []

    def upload() -> None:
        try:
            httpx.post(
                svc.url + "/v1/registry/datasets/t/big",
                content=body(),
                headers=svc.headers(),
                timeout=30,
            )
        except BaseException as exc:  # the connection dies with the service
            errors.append(exc)

    t = threading.Thread(target=upload)
    t.start()
    spool = svc.home / "uploads"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = list(spool.glob("*.part")) if spool.exists() else []
        if parts and parts[0].stat().st_size >= 4 * len(chunk):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the upload never reached the service")
    svc.stop(sig=signal.SIGKILL)
    release.set()
    t.join(30)
    assert errors, "the upload should fail when the service dies"

    store = BlobStore(str(svc.home / "blobs"))
    assert store.list("sha256") == []  # no committed blob, partial or whole

    token = svc.token
    again = LiveService(home=svc.home, config_dir=svc.config_dir, port=free_port())
    again.token = token
    again.start()
    try:
        assert list(spool.iterdir()) == []  # start-up removed the partial spool file
        tmp_blobs = svc.home / "blobs" / ".tmp"
        assert not tmp_blobs.exists() or list(tmp_blobs.iterdir()) == []
        assert again.api("GET", "/v1/registry/datasets/t/big").status_code == 404
        assert again.api("GET", "/v1/registry/datasets").json()["items"] == []
        f = tmp_path / "small.jsonl"
        f.write_bytes(line * 3)
        out = again.cli("registry", "datasets", "register", "t/big", "-f", str(f), "-o", "json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["version"] == "v1"
    finally:
        again.stop()
