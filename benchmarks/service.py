"""Service load benchmark (issue 14 "Load in make bench"): ``service_load``.

Starts the real service (``akka-optimize server start``) on a fresh home with the
default SQLite store and runs 50 concurrent clients (asyncio + httpx) for 30 s (8 s with
``quick``). Each client loops over a mix of routes: ``GET /healthz`` (the baseline),
registry lists and gets, the versions of a dataset, the runs list, and dataset
registrations (one in five requests; every registration has new content, so each must
make exactly one new version).

Reported:

- ``service_load.errors``: responses that are not 2xx, plus transport errors (goal 0);
- ``service_load.lost_versions`` / ``duplicated_versions``: registrations answered
  ``created`` whose digest is not listed once among the name's versions, and listed
  versions that are not contiguous ``1..n`` or repeat a digest (goal 0 each);
- ``service_load.p99.<route>``: the 99th percentile latency of each route in ms, with
  ``/healthz`` p99 of the same run as the baseline (ratio = route p99 / healthz p99).
  The goal is p99 < 200 ms for every route on the development machine.

That is the single process (``server start --workers 1``) on SQLite. The same load then
runs on ``--workers 2`` over SQLite, and, when PostgreSQL's server binaries are installed
(Debian's ``postgresql``, as ``make test-stores`` uses them: tests/pg.py), on
``--workers 1`` and ``--workers 2`` over a fresh PostgreSQL database each (issue 49 item
6); without them the PostgreSQL rows are left out with a printed reason. Each of these
configurations ``<store>_w<N>`` reports ``service_load.<store>_w<N>.requests_per_s``,
``.errors``, ``.lost_versions``, ``.duplicated_versions`` and ``.p50.<route>`` /
``.p99.<route>``; ``service_load.<store>.scaling`` is requests/s with 2 workers over
requests/s with 1 (goal >= 1.6 on PostgreSQL, where writers do not take turns).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

CLIENTS = 50
NAMES = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(
    home: Path, port: int, workers: int = 1, db_url: str | None = None
) -> tuple[subprocess.Popen, str]:
    import httpx

    env = {k: v for k, v in os.environ.items() if not k.startswith("AKKA_")}
    env["AKKA_OPTIMIZE_HOME"] = str(home)
    if db_url:
        env["AKKA_OPTIMIZE_DATABASE_URL"] = db_url
    exe = Path(sys.executable).parent / "akka-optimize"
    # The token first: it creates the state (running migrations) before the service starts.
    token = subprocess.run(
        [str(exe), "server", "token", "create"], env=env, capture_output=True, text=True
    ).stdout.split()[-1]
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "start",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--workers",
            str(workers),
        ],  # fmt: skip
        env=env,
        stdout=open(home / "server.log", "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url + "/v1/training/info", headers={"Authorization": f"Bearer {token}"})
            if r.status_code == 200 and r.json().get("startedCompletely"):
                return proc, token
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the service did not start: " + (home / "server.log").read_text()[-2000:])


def _row(client: int, n: int) -> bytes:
    row = {
        "messages": [
            {"role": "user", "content": f"client {client} request {n}: what is {n} + {client}?"},
            {"role": "assistant", "content": str(n + client)},
        ]
    }
    return (json.dumps(row) + "\n").encode()


async def _client(i: int, http, stop: float, lat: dict, created: dict, errors: list) -> None:
    rng = random.Random(i)
    n = 0
    while time.monotonic() < stop:
        n += 1
        name = f"d{rng.randrange(NAMES)}"
        pick = rng.random()
        if pick < 0.2:
            route, method, path, body = (
                "register",
                "POST",
                f"/v1/registry/datasets/bench/{name}",
                _row(i, n),
            )
        elif pick < 0.35:
            route, method, path, body = "healthz", "GET", "/healthz", None
        elif pick < 0.5:
            route, method, path, body = "list datasets", "GET", "/v1/registry/datasets", None
        elif pick < 0.7:
            route, method, path, body = (
                "get dataset",
                "GET",
                f"/v1/registry/datasets/bench/{name}",
                None,
            )
        elif pick < 0.85:
            route, method, path, body = (
                "list versions",
                "GET",
                f"/v1/registry/datasets/bench/{name}/versions",
                None,
            )
        else:
            route, method, path, body = "list runs", "GET", "/v1/training/runs", None
        t = time.perf_counter()
        try:
            r = await http.request(method, path, content=body)
        except Exception as exc:  # counted, never hidden
            errors.append(f"{route}: {type(exc).__name__}: {exc}")
            continue
        lat[route].append((time.perf_counter() - t) * 1000)
        if route in ("get dataset", "list versions") and r.status_code == 404:
            continue  # not registered yet
        if r.status_code >= 300:
            errors.append(f"{route}: {r.status_code} {r.text[:200]}")
        elif route == "register":
            doc = r.json()
            if doc.get("created"):
                created[name].append(doc["digest"])


def _p99(xs: list[float]) -> float:
    return _pct(xs, 0.99)


def _check_versions(url: str, token: str, created: dict) -> tuple[int, int]:
    import httpx

    lost = dup = 0
    for name in sorted(set(created) | {f"d{k}" for k in range(NAMES)}):
        r = httpx.get(
            f"{url}/v1/registry/datasets/bench/{name}/versions",
            headers={"Authorization": f"Bearer {token}"},
            params={"limit": 1000},
            timeout=60,
        )
        items = r.json().get("items", []) if r.status_code == 200 else []
        numbers = [int(v["version"].removeprefix("v")) for v in items]
        digests = [v["digest"] for v in items]
        dup += len(numbers) - len(set(numbers)) + len(digests) - len(set(digests))
        dup += sum(
            1 for a, b in zip(sorted(numbers), range(1, len(numbers) + 1), strict=True) if a != b
        )
        lost += sum(1 for d in created.get(name, []) if digests.count(d) != 1)
    return lost, dup


async def _load(url: str, token: str, seconds: float):
    import httpx

    lat: dict[str, list[float]] = defaultdict(list)
    created: dict[str, list[str]] = defaultdict(list)
    errors: list[str] = []

    def connect() -> httpx.AsyncClient:
        # One connection per client, as 50 users would have: a single pool shared by all 50
        # costs httpcore O(connections) per request (it checks every pooled connection's
        # expiry), and at ~200 requests/s took the client a whole core (issue 14, load).
        return httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=60,
        )

    async with connect() as http:
        # Warm-up, not measured: the first request of each route imports its modules.
        await http.post("/v1/registry/datasets/bench/warm", content=_row(-1, 0))
        for path in (
            "/healthz",
            "/v1/registry/datasets",
            "/v1/training/runs",
            "/v1/registry/datasets/bench/warm",
            "/v1/registry/datasets/bench/warm/versions",
        ):
            await http.get(path)  # fmt: skip
    clients = [connect() for _ in range(CLIENTS)]
    try:
        stop = time.monotonic() + seconds
        await asyncio.gather(
            *(_client(i, clients[i], stop, lat, created, errors) for i in range(CLIENTS))
        )
    finally:
        for http in clients:
            await http.aclose()
    return lat, created, errors


def _measure(seconds: float, workers: int = 1, db_url: str | None = None) -> dict:
    """One configuration under the load: latencies per route, registrations, errors and
    the version check, on a fresh home (and ``db_url``'s store when given)."""
    with tempfile.TemporaryDirectory(prefix="akka-bench-service-") as tmp:
        home = Path(tmp)
        port = _free_port()
        proc, token = _start(home, port, workers, db_url)
        url = f"http://127.0.0.1:{port}"
        try:
            lat, created, errors = asyncio.run(_load(url, token, seconds))
            lost, dup = _check_versions(url, token, created)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    total = sum(len(v) for v in lat.values())
    return {"lat": lat, "created": created, "errors": errors, "lost": lost, "dup": dup,
            "total": total, "rps": total / seconds, "seconds": seconds}  # fmt: skip


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _config_rows(label: str, m: dict) -> list[dict]:
    """The rows of one configuration ``label`` (``sqlite_w2``, ``pg_w1``…)."""
    pre = f"service_load.{label}"
    detail = f"{CLIENTS} clients, {m['seconds']:g} s, {m['total']} requests"
    out = [
        {"name": f"{pre}.requests_per_s", "value": m["rps"], "unit": "req/s", "baseline": None,
         "ratio": None, "detail": detail},
        {"name": f"{pre}.errors", "value": len(m["errors"]), "unit": "count", "baseline": 0,
         "ratio": None, "detail": "; ".join(m["errors"][:5]) or detail},
        {"name": f"{pre}.lost_versions", "value": m["lost"], "unit": "count", "baseline": 0,
         "ratio": None},
        {"name": f"{pre}.duplicated_versions", "value": m["dup"], "unit": "count",
         "baseline": 0, "ratio": None},
    ]  # fmt: skip
    for route in sorted(m["lat"]):
        for q, tag in ((0.5, "p50"), (0.99, "p99")):
            out.append(
                {
                    "name": f"{pre}.{tag}.{route.replace(' ', '_')}",
                    "value": _pct(m["lat"][route], q),
                    "unit": "ms",
                    "baseline": None,
                    "ratio": None,
                    "detail": f"{len(m['lat'][route])} requests; goal p99 < 200 ms",
                }
            )
    return out


def _scaling(store: str, one: dict, two: dict, goal: str) -> dict:
    return {"name": f"service_load.{store}.scaling", "value": two["rps"] / one["rps"],
            "unit": "x", "baseline": one["rps"], "ratio": two["rps"] / one["rps"],
            "detail": f"requests/s with --workers 2 over --workers 1; {goal}"}  # fmt: skip


def _postgres_rows(seconds: float) -> list[dict]:
    """``pg_w1`` and ``pg_w2`` on a throwaway PostgreSQL server (tests/pg.py), a fresh
    database each; no rows, with a printed reason, where its binaries are missing."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pg import _bin_dir, postgres_server

    if _bin_dir() is None:
        print("  PostgreSQL rows skipped: no initdb under /usr/lib/postgresql (install "
              "Debian's postgresql, as make test-stores does)", flush=True)  # fmt: skip
        return []
    import psycopg

    with postgres_server() as url:
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as conn:
            for db in ("w1", "w2"):
                conn.execute(f"CREATE DATABASE {db}")
        base = url.rsplit("/", 1)[0]
        m1 = _measure(seconds, 1, f"{base}/w1")
        m2 = _measure(seconds, 2, f"{base}/w2")
    out = _config_rows("pg_w1", m1) + _config_rows("pg_w2", m2)
    return out + [_scaling("pg", m1, m2, "goal >= 1.6")]


def run(quick: bool) -> list[dict]:
    """Run the load; see the module docstring."""
    seconds = 8.0 if quick else 30.0
    m = _measure(seconds)
    w2 = _measure(seconds, workers=2)
    lat, created, errors, lost, dup = m["lat"], m["created"], m["errors"], m["lost"], m["dup"]
    base = _p99(lat["healthz"])
    total = m["total"]
    detail = f"{CLIENTS} clients, {seconds:g} s, {total} requests ({total / seconds:.0f}/s)"
    out = [
        {"name": "service_load.errors", "value": len(errors), "unit": "count", "baseline": 0,
         "ratio": None, "detail": "; ".join(errors[:5]) or detail},
        {"name": "service_load.lost_versions", "value": lost, "unit": "count", "baseline": 0,
         "ratio": None, "detail": f"{sum(len(v) for v in created.values())} registrations created"},
        {"name": "service_load.duplicated_versions", "value": dup, "unit": "count",
         "baseline": 0, "ratio": None},
    ]  # fmt: skip
    for route in sorted(lat):
        p99 = _p99(lat[route])
        out.append(
            {
                "name": f"service_load.p99.{route.replace(' ', '_')}",
                "value": p99,
                "unit": "ms",
                "baseline": base,
                "ratio": p99 / base if base else None,
                "detail": f"{len(lat[route])} requests; baseline /healthz p99; goal < 200 ms",
            }
        )
    out += _config_rows("sqlite_w1", m) + _config_rows("sqlite_w2", w2)
    out.append(_scaling("sqlite", m, w2, "SQLite writers take turns"))
    return out + _postgres_rows(seconds)
