"""An in-process service (the real app, real SQLite or PostgreSQL) for HTTP-level tests.

Start-up runs synchronously, so a test needs no wait; the token is issued straight
into the store, as ``server token create`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from akka_optimize.core.auth import issue_token
from akka_optimize.service import create_app
from akka_optimize.service.app import _shutdown, _startup
from akka_optimize.settings import Settings
from cluster_stores import store_env


@dataclass
class InProcess:
    """An app, a client for it and an admin token's headers."""

    app: FastAPI
    client: TestClient
    headers: dict[str, str]
    home: Path

    def call(self, method: str, path: str, **kw) -> object:
        """A request with the admin token."""
        return self.client.request(method, path, headers={**self.headers, **kw.pop("h", {})}, **kw)


@contextmanager
def in_process(home: Path, monkeypatch, database_url: str | None = None) -> Iterator[InProcess]:
    """Yield a started in-process service rooted at ``home``."""
    monkeypatch.setenv("AKKA_OPTIMIZE_HOME", str(home))
    for key, value in store_env(home).items():  # the second pass's stores (cluster_stores.py)
        monkeypatch.setenv(key, value)
    if database_url:
        monkeypatch.setenv("AKKA_OPTIMIZE_DATABASE_URL", database_url)
    app = create_app(Settings.from_env())
    ctx = app.state.ctx
    _startup(ctx)
    assert ctx.startup_error is None, ctx.startup_error
    token = issue_token(ctx.db)
    client = TestClient(app, raise_server_exceptions=False)
    try:
        yield InProcess(app, client, {"Authorization": f"Bearer {token}"}, home)
    finally:
        client.close()
        _shutdown(ctx)  # the scheduler and managers stop before the store goes
