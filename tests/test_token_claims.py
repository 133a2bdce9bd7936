"""README "Tokens": every route except ``/healthz`` needs a bearer token, and tokens are
stored hashed. One service for the module: neither test needs a fresh home."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from helpers import LiveService, free_port

PUBLIC = {("GET", "/healthz")}


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    tmp = tmp_path_factory.mktemp("token-claims")
    s = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port()).start()
    try:
        yield s
    finally:
        s.stop()


def test_tokens_are_stored_hashed(svc: LiveService) -> None:
    from akka_optimize.db import Database
    from akka_optimize.db.models.auth import ApiToken
    from akka_optimize.settings import Settings

    made = svc.api("POST", "/v1/training/projects", json={"name": "demo"})
    assert made.status_code in (200, 201), made.text
    token = svc.create_token(project="demo")
    ok = httpx.get(
        f"{svc.url}/v1/training/info", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert ok.status_code == 200, ok.text  # the token issued works
    db = Database(Settings(home=svc.home).database_url)
    try:
        with db.session() as s:
            rows = list(s.scalars(select(ApiToken)))
            stored = [(r.token_sha256, r.project) for r in rows]
    finally:
        db.dispose()
    assert (hashlib.sha256(token.encode()).hexdigest(), "demo") in stored
    # The clear token is nowhere in the state store's files (database, WAL, journal).
    files = [p for p in Path(svc.home).glob("state.db*") if p.is_file()]
    assert files
    for f in files:
        assert token.encode() not in f.read_bytes(), f"{f.name} holds the clear token"


def _routes(svc: LiveService) -> list[tuple[str, str]]:
    spec = svc.api("GET", "/openapi.json").json()
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", "x", path))
        for path, ops in spec["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_every_route_but_healthz_needs_a_token(svc: LiveService) -> None:
    routes = _routes(svc)
    assert len(routes) > 40 and ("POST", "/v1/training/runs") in routes
    open_routes = []
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer ak_not-a-token"}):
            r = httpx.request(method, svc.url + path, headers=headers, timeout=30)
            if (method, path) in PUBLIC:
                assert r.status_code == 200, (method, path, r.status_code)
            elif r.status_code != 401:
                open_routes.append((method, path, headers and "bad token", r.status_code))
    assert not open_routes, open_routes
