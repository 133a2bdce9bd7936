"""A dry run whose client leaves stops (issue 14 item 3: "Stop work whose client has
gone"). The dry run is held before its findings (:mod:`akka_optimize.testhooks`) while
the client closes its connection; the service notices, and once released the findings
stop at their first check instead of reading every row for nobody."""

from __future__ import annotations

import json
import socket
import time

from helpers import LiveService, gsm8k_rows, hold_at, release, wait_held


def _log_says(svc: LiveService, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in svc.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"the service never logged {text!r}"
        time.sleep(0.05)


def test_a_dry_run_whose_client_left_stops(service: LiveService, tmp_path) -> None:
    service.cli("training", "projects", "create", "demo", check=True)
    data = gsm8k_rows(tmp_path / "train.jsonl", 8)
    service.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": "akka-optimize/tiny-smollm2",
        "config": {"dataset": "demo/train", "method": "sft"},
    }
    # the same dry run answers while its client waits (nothing is held yet)
    answered = service.api("POST", "/v1/training/runs?dryRun=true", json=plan)
    assert answered.status_code == 200 and answered.json()["findings"]["rows"] == 8

    hold_at(service, "findings")
    body = json.dumps(plan).encode()
    head = (
        "POST /v1/training/runs?dryRun=true HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{service.port}\r\n"
        f"Authorization: {service.headers()['Authorization']}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    client = socket.create_connection(("127.0.0.1", service.port))
    client.sendall(head.encode() + body)
    wait_held(service)
    client.close()  # the client leaves while its dry run is held
    _log_says(service, "the client of a dry run left; stopping it")
    release(service)
    _log_says(service, "a dry run stopped: its client left")
