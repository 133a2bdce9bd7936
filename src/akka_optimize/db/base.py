"""Declarative base, engine construction and sessions."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from ..testhooks import hold

try:
    import fcntl
except ImportError:  # not POSIX: writers of several processes wait in SQLite's busy handler
    fcntl = None  # type: ignore[assignment]

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of every table; constraint names are deterministic for migrations."""

    metadata = MetaData(naming_convention=NAMING)


def utcnow() -> dt.datetime:
    """Timezone-aware now in UTC (stored as naive UTC by SQLite)."""
    return dt.datetime.now(dt.UTC)


#: Whether the current unit of work may write. The service sets it to False for
#: GET and HEAD requests; everything else (writing requests, workers, threads)
#: keeps True. On SQLite a writing transaction starts with ``BEGIN IMMEDIATE``
#: so it takes the write lock before its first read and never fails with a
#: stale snapshot; a reading one starts with a plain ``BEGIN`` and never waits.
write_intent: ContextVar[bool] = ContextVar("akka_write_intent", default=True)


@contextmanager
def intent(write: bool) -> Iterator[None]:
    """Run the block's sessions as writing (``BEGIN IMMEDIATE`` on SQLite) or reading
    (plain ``BEGIN``) units of work. A reading session that opens a writing one inside it
    (a status update while the read is open) must say so, or the inner ``BEGIN IMMEDIATE``
    of the same thread waits on nothing but itself until the busy timeout."""
    token = write_intent.set(write)
    try:
        yield
    finally:
        write_intent.reset(token)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # The driver's own transaction handling is off: it would start a transaction
    # only before the first INSERT/UPDATE/DELETE, so a SAVEPOINT opened before
    # that started a transaction of its own and its RELEASE committed. SQLAlchemy
    # emits BEGIN itself (``_sqlite_begin``), and savepoints nest inside it.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class LoopBlockingError(RuntimeError):
    """A state-store transaction began on a thread that runs an event loop.

    A session's statements (and on SQLite the :class:`WriteGate` a writer waits on, for up
    to its 30 s timeout) block the thread that runs them; on the service's event loop that
    stalls every request, ``/healthz`` included (issue 48 item 1: chat completions on a
    missing endpoint opened their session there and waited on a writer of the thread
    pool). Raised at once instead, naming the cause: a programming error; an ``async``
    route runs its database work through ``starlette.concurrency.run_in_threadpool``."""


def _refuse_on_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise LoopBlockingError(
        "A state-store transaction began on the event loop thread; it would block every "
        "request while it waits. Run it in the thread pool (run_in_threadpool)."
    )


class NestedWriteError(RuntimeError):
    """A thread began a writing transaction while it already held another one open.

    On SQLite the inner ``BEGIN IMMEDIATE`` would wait for the outer one's write lock,
    which the same thread releases only after the inner one returns: it would wait the
    whole busy timeout and then fail with "database is locked". Raised at once instead,
    naming the cause (a programming error: read with ``intent(write=False)``, or commit
    the outer session before opening the inner one)."""


#: The DB-API connections whose writing transaction is open, each with its owner: the
#: execution context (thread, or thread-pool call) that began it. A transaction may end on
#: another thread than the one that began it (FastAPI runs a dependency's set-up, the
#: handler and the tear-down as separate thread-pool calls), so the end is recorded
#: globally and the owner is the context, not the thread: a pool thread that began a
#: transaction and is then reused by the next request is not refused.
_open_writes: dict[int, object] = {}
_open_lock = threading.Lock()
_owner_var: ContextVar[object | None] = ContextVar("akka_write_owner", default=None)


def _owner() -> object:
    owner = _owner_var.get()
    if owner is None:
        owner = object()
        _owner_var.set(owner)
    return owner


def _dbapi_id(conn: Any) -> int:
    return id(conn.connection.dbapi_connection)


class WriteGate:
    """One writing transaction at a time per engine, queued in this process and, with
    ``lock_path``, across the processes that write the same SQLite file.

    SQLite lets one transaction write; a second ``BEGIN IMMEDIATE`` waits in SQLite's busy
    handler, which sleeps and polls (up to 100 ms between tries), so under concurrent
    registrations a writer waited up to a second after the lock was free (issue 14, load:
    register p99 1.4 s). Writers of this process wait here instead, on a lock that wakes
    the next one when the holder's COMMIT or ROLLBACK has run. Writers of several
    processes (``server start --workers N``, the CLI's ``server token create``) then hold
    an exclusive ``flock`` on ``lock_path`` (the state file's name plus ``-writers``) for
    the same span: one waiter per process tries it every 0.5-4 ms, not SQLite's 100. The
    busy timeout still covers any writer that does not use the gate.
    """

    def __init__(self, timeout: float, lock_path: str | None = None) -> None:
        self.timeout = timeout
        self.lock_path = lock_path if fcntl is not None else None
        self._lock = threading.Lock()
        self._holder: int | None = None
        self._fd: int | None = None
        self._fd_pid = 0

    def enter(self, dbapi_id: int) -> None:
        """Wait for the gate (at most ``timeout`` s), held by DB-API connection
        ``dbapi_id``. Raises sqlalchemy's OperationalError ("database is locked", what
        SQLite's busy timeout raises) on timeout: the service answers it with 503."""
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            _locked(f"another writer of this service held it for {self.timeout:g} s")
        if self.lock_path is not None and not self._across(deadline):
            self._lock.release()
            _locked(f"a writer of another process held it for {self.timeout:g} s")
        self._holder = dbapi_id

    def _across(self, deadline: float) -> bool:
        """Take the ``flock`` on :attr:`lock_path` before ``deadline``; False when not."""
        if self._fd is None or self._fd_pid != os.getpid():  # a forked child opens its own
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._fd_pid = os.getpid()
        wait = 0.0005
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(wait)
            wait = min(wait * 2, 0.004)

    def leave(self, dbapi_id: int) -> None:
        """Open the gate if ``dbapi_id`` holds it (its transaction has ended)."""
        if self._holder == dbapi_id:
            self._holder = None
            if self.lock_path is not None and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._lock.release()


def _locked(held: str) -> None:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    reason = sqlite3.OperationalError(f"database is locked: {held}")
    raise OperationalError("BEGIN IMMEDIATE", None, reason)


def writers_lock_path(url: str) -> str | None:
    """The file whose ``flock`` queues the writers of the SQLite file of ``url`` across
    processes (:class:`WriteGate`); None for an in-memory or non-SQLite database."""
    if not url.startswith("sqlite:///") or ":memory:" in url:
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    return path + "-writers" if path else None


def _sqlite_begin(gate: WriteGate, conn: Any) -> None:
    _refuse_on_event_loop()
    write = write_intent.get()
    if write:
        me, this = _owner(), _dbapi_id(conn)
        with _open_lock:
            nested = any(o is me and c != this for c, o in _open_writes.items())
        if nested:
            raise NestedWriteError(
                "This thread already holds a writing transaction open on the state store; "
                "a second one would wait on it until 'database is locked'."
            )
        gate.enter(this)
        hold("write-gate")  # tests only: a writer holding the gate until the test lets go
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            gate.leave(this)
            raise
        with _open_lock:
            _open_writes[this] = _owner()
        return
    conn.exec_driver_sql("BEGIN")


def _sqlite_end(conn: Any) -> None:
    with _open_lock:
        _open_writes.pop(_dbapi_id(conn), None)


def _sqlite_checkin(gate: WriteGate, dbapi_conn: Any, _record: Any) -> None:
    with _open_lock:
        _open_writes.pop(id(dbapi_conn), None)
    gate.leave(id(dbapi_conn))


def _sqlite_gone(gate: WriteGate, dbapi_conn: Any, record: Any, _exc: Any) -> None:
    _sqlite_checkin(gate, dbapi_conn, record)


def _gate_transaction_ends(eng: Engine, gate: WriteGate) -> None:
    """Open ``gate`` after the DB-API COMMIT or ROLLBACK itself (SQLAlchemy's ``commit``
    event runs before it, when the write lock is still held)."""
    dialect = eng.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(conn: Any) -> None:  # the pool's proxy of the DB-API connection
        try:
            commit(conn)
        finally:
            gate.leave(id(getattr(conn, "dbapi_connection", conn)))

    def do_rollback(conn: Any) -> None:
        try:
            rollback(conn)
        finally:
            gate.leave(id(getattr(conn, "dbapi_connection", conn)))

    dialect.do_commit = do_commit  # type: ignore[method-assign]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign]


def make_engine(url: str, gate: WriteGate | None = None) -> Engine:
    """An engine for ``url``; SQLite gets WAL mode, a busy timeout, foreign keys and a
    :class:`WriteGate` (``gate``, or a new one with a 30 s timeout) that queues this
    process's writers.

    SQLite's pool holds up to 64 connections (16 kept open): in WAL mode readers never
    wait for a writer, so every request thread of the service (40) gets its own
    connection instead of queueing for one of the default 15 behind a slow write
    (issue 14, "Load in make bench").
    """
    if url.startswith("sqlite"):
        eng = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            **({} if ":memory:" in url else {"pool_size": 16, "max_overflow": 48}),
        )
        gate = gate or WriteGate(timeout=30.0, lock_path=writers_lock_path(url))
        event.listen(eng, "connect", _sqlite_pragmas)
        event.listen(eng, "begin", functools.partial(_sqlite_begin, gate))
        event.listen(eng, "commit", _sqlite_end)
        event.listen(eng, "rollback", _sqlite_end)
        event.listen(eng.pool, "checkin", functools.partial(_sqlite_checkin, gate))
        # A connection closed or invalidated inside its transaction lost SQLite's lock too.
        event.listen(eng.pool, "close", functools.partial(_sqlite_checkin, gate))
        event.listen(eng.pool, "invalidate", functools.partial(_sqlite_gone, gate))
        _gate_transaction_ends(eng, gate)
        return eng
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    eng = create_engine(url, pool_pre_ping=True)
    event.listen(eng, "begin", lambda _conn: _refuse_on_event_loop())
    return eng


class Database:
    """An engine plus a session factory for one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        #: The SQLite engine's :class:`WriteGate` (None on other backends).
        self.write_gate = (
            WriteGate(timeout=30.0, lock_path=writers_lock_path(url))
            if url.startswith("sqlite")
            else None
        )
        self.engine = make_engine(url, self.write_gate)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on clean exit and rolled back on error.

        The whole session is one transaction on every backend: a refusal raised
        anywhere inside it stores nothing, savepoints included.
        """
        s = self.open_session()
        try:
            yield s
        except BaseException:
            self.end_session(s, commit=False)
            raise
        self.end_session(s, commit=True)

    def open_session(self) -> Session:
        """A new session (no connection until its first statement); end it with
        :meth:`end_session`, as :meth:`session` does.

        Its first statement raises :class:`LoopBlockingError` on a thread that runs an
        event loop (creating it there does no I/O)."""
        return self._sessions()

    @staticmethod
    def end_session(s: Session, commit: bool) -> None:
        """Commit ``s`` (or roll it back when ``commit`` is False, or when the commit
        fails, re-raising) and close it."""
        try:
            if commit:
                s.commit()
            else:
                s.rollback()
        except BaseException:
            s.rollback()
            raise
        finally:
            s.close()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
