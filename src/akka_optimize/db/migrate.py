"""Apply Alembic migrations programmatically (the service does this at start).

Several processes may upgrade one database at the same moment: a service starting in the
background while an operator runs ``server token create`` (which migrates too), or two
service replicas over one PostgreSQL database. Alembic does not serialise them: each
reads the version table, finds it behind, and all but one then fail creating tables that
now exist. So an upgrade holds a lock for the whole of it: a PostgreSQL advisory lock
(``pg_advisory_lock``, held by a connection of its own until the upgrade ends), or, for
an SQLite file, an exclusive ``flock`` on ``<file>.migrate-lock`` beside it. The second
process waits, then finds the database at head and does nothing.
"""

from __future__ import annotations

import fcntl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).parent / "migrations"
ADVISORY_LOCK_KEY = zlib.crc32(b"akka_optimize.db.migrate")
"""The PostgreSQL advisory lock key upgrades take (any 64-bit integer this database's
other users do not take)."""


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the packaged migrations and ``url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


@contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Hold the database's migration lock (module docstring) while the block runs.

    Raises:
        sqlalchemy.exc.OperationalError: PostgreSQL cannot be reached.
        OSError: the SQLite file's folder cannot hold the lock file.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        engine = create_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
                try:
                    yield
                finally:
                    conn.execute(
                        text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY}
                    )
        finally:
            engine.dispose()
    elif backend == "sqlite" and parsed.database and parsed.database != ":memory:":
        lock = Path(parsed.database).with_name(Path(parsed.database).name + ".migrate-lock")
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
            yield
    else:
        yield


def upgrade(url: str) -> None:
    """Bring the database at ``url`` to the newest migration (``alembic upgrade head``),
    one process at a time (:func:`migration_lock`)."""
    with migration_lock(url):
        command.upgrade(alembic_config(url), "head")
