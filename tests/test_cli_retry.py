"""F136: a 503 ("retry after a few seconds", an access-check outage) is retried once by
every command, including ``runs start``, which sends its plan itself, and the answer after
the retry is the one the user sees."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from helpers import BIN, base_env


class Outage(BaseHTTPRequestHandler):
    """Answers the first request with 503 (``Retry-After: 0``), every later one with
    ``self.server.answer`` (status, JSON body); records each request line."""

    def _answer(self) -> None:
        server: Any = self.server
        server.seen.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, body = (
            (503, {"error": {"code": "unavailable", "message": "retry after a few seconds"}})
            if len(server.seen) == 1
            else server.answer
        )
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def outage():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Outage)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _cli(tmp_path, server, *args: str) -> subprocess.CompletedProcess:
    env = base_env(tmp_path / "h", tmp_path / "c")
    env["AKKA_OPTIMIZE_URL"] = f"http://127.0.0.1:{server.server_address[1]}"
    env["AKKA_OPTIMIZE_TOKEN"] = "ak_x"
    return subprocess.run(
        [str(BIN / "akka-optimize"), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_runs_start_retries_once_after_a_503(tmp_path, outage) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kind": "run", "project": "p", "config": {"dataset": "p/d"}}))
    outage.answer = (400, {"error": {"code": "invalid", "message": "the second answer"}})
    out = _cli(tmp_path, outage, "training", "runs", "start", "-f", str(plan), "--yes")
    # the dry run before the start (its findings) is the first request: retried once
    assert outage.seen[:2] == ["POST /v1/training/runs?dryRun=true"] * 2, outage.seen
    assert out.returncode != 0 and "the second answer" in out.stderr, out.stderr
    assert "retry after" not in out.stderr


def test_other_commands_retry_once_after_a_503(tmp_path, outage) -> None:
    outage.answer = (200, {"projects": []})
    out = _cli(tmp_path, outage, "training", "projects", "list", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert len(outage.seen) == 2 and outage.seen[0] == outage.seen[1], outage.seen
