"""The same tests on a cluster's stores (issue 25 item 4): PostgreSQL state and S3 blobs.

With ``AKKA_OPTIMIZE_TEST_STORES=postgres+s3`` every service and CLI a test starts (through
:func:`helpers.base_env` or :func:`service_app.in_process`) keeps its state in its own
database on one throwaway PostgreSQL server and its blobs under its own prefix of a bucket
on one ``moto_server`` (an S3-compatible HTTP server), both started once per test process.
The database and the prefix are named after the service's home, so a CLI command that
opens the store itself (``server token create``) finds the service's state. ``.ci/run``
runs the registry, run and endpoint tests a second time this way; a test that reads the
home's ``state.db`` or ``blobs/`` itself is marked ``local_stores`` and runs only in the
first pass.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from ports import free_port

ENV_VAR = "AKKA_OPTIMIZE_TEST_STORES"
BUCKET = "akka-test-blobs"


def enabled() -> bool:
    """Whether this test process runs on PostgreSQL + S3 instead of SQLite + a folder."""
    value = os.environ.get(ENV_VAR, "")
    if value not in ("", "postgres+s3"):
        raise RuntimeError(f"{ENV_VAR}={value!r}: the one other store set is 'postgres+s3'")
    return value == "postgres+s3"


class _Servers:
    """One PostgreSQL server and one S3 server for this test process, started on first use."""

    def __init__(self) -> None:
        self.stack: ExitStack | None = None
        self.pg_url = ""
        self.s3_env: dict[str, str] = {}
        self.databases: set[str] = set()

    def start(self) -> None:
        if self.stack is not None:
            return
        from pg import postgres_server  # noqa: PLC0415 (pytest is imported only when used)

        self.stack = ExitStack()
        atexit.register(self.stack.close)
        self.pg_url = self.stack.enter_context(postgres_server())
        self.s3_env = self._start_moto()

    def _start_moto(self) -> dict[str, str]:
        port = free_port()
        log = open(Path(tempfile.mkdtemp(prefix="akka-moto-")) / "moto.log", "ab")
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.stack.callback(lambda: (os.killpg(proc.pid, signal.SIGTERM), proc.wait(20)))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with code {proc.returncode}")
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not answer within 60 s") from None
                time.sleep(0.1)
        answer = httpx.put(f"{url}/{BUCKET}", timeout=10)
        if answer.status_code != 200:
            raise RuntimeError(f"creating bucket {BUCKET} answered {answer.status_code}")
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": url,
        }

    def database(self, name: str) -> str:
        """The URL of database ``name`` on the server, created on first use."""
        import psycopg  # noqa: PLC0415

        if name not in self.databases:
            admin = self.pg_url.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(admin, autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if exists.fetchone() is None:
                    conn.execute(f'CREATE DATABASE "{name}"')
            self.databases.add(name)
        return self.pg_url.rsplit("/", 1)[0] + f"/{name}"


_SERVERS = _Servers()


def store_env(home: Path) -> dict[str, str]:
    """The variables that put ``home``'s state and blobs on the cluster stores.

    Empty unless :func:`enabled`. The database ``h<sha1 of the home path>`` and the blob
    prefix of the same name are created on first use; raises ``RuntimeError`` when a server
    does not start.
    """
    if not enabled():
        return {}
    _SERVERS.start()
    name = "h" + hashlib.sha1(str(Path(home).resolve()).encode()).hexdigest()[:20]
    return {
        "AKKA_OPTIMIZE_DATABASE_URL": _SERVERS.database(name),
        "AKKA_OPTIMIZE_BLOBS_URL": f"s3://{BUCKET}/{name}",
        **_SERVERS.s3_env,
    }


def state_rows(home: Path, sql: str, **params: object) -> list[tuple]:
    """The rows ``sql`` selects from ``home``'s state store, whichever pass this is (its
    ``state.db``, or its PostgreSQL database), for tests that check what is stored."""
    import sqlalchemy  # noqa: PLC0415

    url = store_env(home).get("AKKA_OPTIMIZE_DATABASE_URL") or f"sqlite:///{home}/state.db"
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sqlalchemy.text(sql), params)]
    finally:
        engine.dispose()
