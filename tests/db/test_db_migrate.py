"""Migrations (db/migrate.py): several processes that upgrade one database at once — a
service starting while an operator runs ``server token create``, or two service replicas
over one PostgreSQL database — all succeed, one after another."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import create_engine, inspect

from akka_optimize.db.migrate import alembic_config
from pg import postgres_server

UPGRADE = "import sys; from akka_optimize.db.migrate import upgrade; upgrade(sys.argv[1])"


def _upgrade_together(url: str, n: int = 4) -> list[tuple[int, str]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(n)
    ]
    return [(p.wait(timeout=300), p.stdout.read()) for p in procs]  # type: ignore[union-attr]


def _head(url: str) -> tuple[str | None, set[str]]:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert current == ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    return current, tables


@pytest.mark.postgres
def test_concurrent_upgrades_of_one_postgresql_database_all_succeed() -> None:
    with postgres_server() as url:
        results = _upgrade_together(url)
        assert [code for code, _ in results] == [0] * 4, [out[-800:] for _, out in results]
        _, tables = _head(url)
        assert {"runs", "api_tokens"} <= tables


def test_concurrent_upgrades_of_one_sqlite_file_all_succeed(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    results = _upgrade_together(url)
    assert [code for code, _ in results] == [0] * 4, [out[-800:] for _, out in results]
    _, tables = _head(url)
    assert {"runs", "api_tokens"} <= tables
