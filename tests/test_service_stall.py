"""No request blocks the service's event loop on the state store (issue 48 item 1).

Four chat completions on a missing endpoint and four cancels of a missing evaluation,
sent while another writer holds SQLite's write gate, stalled every request (``/healthz``
included) for 30-90 s: the chat route opened its session on the event loop and waited
there on the gate (``db.base.WriteGate``). Sessions now refuse to open on a thread that
runs an event loop (``db.base.LoopBlockingError``), and the async routes read in the
thread pool.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest
from sqlalchemy import text

from akka_optimize.db import Database
from akka_optimize.db.base import LoopBlockingError
from helpers import LiveService, hold_at, release, wait_held

HEALTHZ_BOUND_S = 10.0
"""How long ``/healthz`` may take while the mix waits. Under 50 busy clients it answers
within 0.12 s (p99, README's load measurements); the stall lasts until the held writer
lets go (here: until the test releases it) or the gate's 30 s timeout."""

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _send(svc: LiveService, path: str, body: dict | None) -> socket.socket:
    """One whole POST written to its own connection (not read yet)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{svc.port}\r\n"
        f"Authorization: Bearer {svc.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", svc.port), timeout=120)
    sock.sendall(head + data)
    return sock


def _status(sock: socket.socket) -> int:
    with sock:
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_requests_waiting_on_a_held_writer_leave_healthz_answering(
    service: LiveService,
) -> None:
    hold_at(service, "write-gate")
    writer = threading.Thread(
        target=service.api, args=("POST", "/v1/training/projects"), kwargs={"json": {"name": "w"}}
    )
    writer.start()
    wait_held(service)  # a thread-pool writer holds the gate
    socks = []
    try:
        for _ in range(4):
            socks.append(
                _send(service, "/v1/training/endpoints/missing0/openai/v1/chat/completions", CHAT)
            )
            socks.append(_send(service, "/v1/training/evaluations/missing0/cancel", None))
        for _ in range(5):  # the eight are read and waiting by now; the loop still answers
            r = httpx.get(service.url + "/healthz", timeout=HEALTHZ_BOUND_S)
            assert r.status_code == 200
        listed = service.api("GET", "/v1/training/projects", timeout=HEALTHZ_BOUND_S)
        assert listed.status_code == 200  # a reader does not wait on the writer either
    finally:
        release(service)
    writer.join(timeout=120)
    assert sorted(_status(s) for s in socks) == [404] * 8  # each answered once let go
    assert service.api("GET", "/v1/training/projects/w").status_code == 200


def test_a_session_opened_on_an_event_loop_is_refused(tmp_path) -> None:
    """The rule behind it: a state-store session on a thread that runs an event loop
    raises at once, naming the cause; the same call in a thread runs."""
    db = Database(f"sqlite:///{tmp_path / 'state.db'}")

    async def on_loop() -> None:
        with db.session() as s:  # creating it does no I/O; its first statement begins
            s.execute(text("SELECT 1"))

    with pytest.raises(LoopBlockingError, match="event loop thread"):
        asyncio.run(on_loop())

    async def in_thread() -> int:
        def read() -> int:
            with db.session() as s:
                return int(s.execute(text("SELECT 1")).scalar_one())

        return await asyncio.to_thread(read)

    assert asyncio.run(in_thread()) == 1
    db.dispose()
