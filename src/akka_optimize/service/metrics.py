"""What this service process counts itself for ``GET /metrics`` (issue 54 item 7, the
operator's view), and the exposition that joins it to what the state store holds.

Two kinds of series, so that several processes over one state store stay correct:

- counted by the process that does the work (:data:`PROCESS`): request latency per route
  (``akka_optimize_http_request_duration_seconds``; the process that answered, an API
  worker or, for the routes it forwards, the controller), endpoint requests and the
  tokens their answers generated (the controller, where endpoints are forwarded). Only
  counters and a histogram: they add up over processes. With ``server start --workers
  N`` (N > 1) every child writes them to one folder (prometheus-client's multiprocess
  mode, :data:`SHARED_DIR`, which the supervisor empties before it starts them) and
  whichever API process answers ``/metrics`` sums the folder's files, those of exited
  processes included (a counter never goes back when a process is restarted).
- read from the state store at each scrape (:mod:`.metrics_store`): runs by state,
  queue length and wait per pool, device claims, endpoints, each run's updates, trained
  tokens and tokens/s. The answering process computes them itself (a collector, never a
  gauge written to the shared folder and summed over processes), so every process
  answers the same values.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's variable naming its multiprocess folder (read when it is imported)."""
SHARED_DIR: str | None = os.environ.get(MULTIPROC_ENV) or None
"""The folder every process of the service writes its own series to (module docstring),
as prometheus-client saw it when this process imported it; None in a single process."""

PROCESS = CollectorRegistry(auto_describe=True)
"""This process's own series (module docstring); one per process, whatever apps it builds.
In multiprocess mode its values live in :data:`SHARED_DIR`'s files, read from there."""

REQUEST_SECONDS = Histogram(
    "akka_optimize_http_request_duration_seconds",
    "Time from a request's arrival to the last byte of its answer, per route template "
    "(seconds); unmatched paths count as route 'unmatched'.",
    ["method", "route", "status"],
    registry=PROCESS,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
ENDPOINT_REQUESTS = Counter(
    "akka_optimize_endpoint_requests",
    "OpenAI requests forwarded to an endpoint's worker, by the worker's answer status.",
    ["endpoint", "status"],
    registry=PROCESS,
)
ENDPOINT_TOKENS = Counter(
    "akka_optimize_endpoint_completion_tokens",
    "Tokens an endpoint generated (usage.completion_tokens of its answers; a streamed "
    "answer counts when the client asked stream_options.include_usage).",
    ["endpoint"],
    registry=PROCESS,
)


class RequestTimer:
    """ASGI middleware observing :data:`REQUEST_SECONDS` for every HTTP request: the route
    is the matched route's template (``/v1/training/runs/{run_id}``, never the raw path,
    so IDs do not become series), the status the answer's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        timed = scope["type"] == "http"
        await (self._timed if timed else self.app)(scope, receive, send)

    async def _timed(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status = [0]

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                _observe(scope, status[0], time.perf_counter() - start)
                status[0] = -1  # observed once

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if status[0] >= 0:  # the answer never finished (client gone, failure)
                _observe(scope, status[0] or 500, time.perf_counter() - start)


def _observe(scope: Scope, status: int, seconds: float) -> None:
    route = scope.get("route")
    template = getattr(route, "path", None) or "unmatched"
    REQUEST_SECONDS.labels(scope.get("method", "GET"), template, str(status)).observe(seconds)


def count_answer(endpoint_id: str, status: int, body: bytes) -> None:
    """Count one forwarded request to ``endpoint_id`` and the ``usage.completion_tokens``
    of its JSON answer ``body`` (nothing for a body that is not such an answer)."""
    ENDPOINT_REQUESTS.labels(endpoint_id, str(status)).inc()
    try:
        usage = json.loads(body).get("usage") or {}
    except (ValueError, AttributeError):
        return
    _count_tokens(endpoint_id, usage)


def _count_tokens(endpoint_id: str, usage: Any) -> None:
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int) and tokens > 0:
        ENDPOINT_TOKENS.labels(endpoint_id).inc(tokens)


class StreamTally:
    """Reads a streamed (SSE) answer's chunks as they pass through, counting the
    ``usage.completion_tokens`` of the chunk that carries usage (OpenAI sends it last,
    when ``stream_options.include_usage`` was asked)."""

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        """Take the next raw bytes of the stream (lines may be cut anywhere)."""
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line:
                try:
                    data = json.loads(line[5:].strip())
                except ValueError:
                    continue
                if isinstance(data, dict):
                    _count_tokens(self.endpoint_id, data.get("usage"))

    def close(self, status: int) -> None:
        """The stream ended: count the request."""
        ENDPOINT_REQUESTS.labels(self.endpoint_id, str(status)).inc()


def exposition(store_registry: CollectorRegistry, shared_dir: str | None = SHARED_DIR) -> bytes:
    """The text format (0.0.4) of the counted series followed by ``store_registry``'s
    (:func:`.metrics_store.store_registry`); the two hold no name in common.

    The counted series are this process's (:data:`PROCESS`) or, with ``shared_dir``, the
    sums over every process's files there (prometheus-client's
    ``MultiProcessCollector``, which writes no ``_created`` samples). Raises ValueError
    when ``shared_dir`` is not a folder."""
    if shared_dir is None:
        return generate_latest(PROCESS) + generate_latest(store_registry)
    summed = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(summed, path=shared_dir)
    return generate_latest(summed) + generate_latest(store_registry)


def fresh_shared_dir(home: Path) -> Path:
    """``home/metrics-multiproc``, emptied (what an earlier service wrote there would be
    summed with this one's) and private: the folder the supervisor gives its children as
    :data:`MULTIPROC_ENV` (``server start --workers N``, N > 1)."""
    folder = home / "metrics-multiproc"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700, parents=True)
    return folder


def process_gone(pid: int, shared_dir: Path) -> None:
    """Tell prometheus-client that process ``pid`` writing to ``shared_dir`` has exited:
    its live gauges' files go (its counters and histograms stay in the sums)."""
    mark_process_dead(pid, str(shared_dir))
