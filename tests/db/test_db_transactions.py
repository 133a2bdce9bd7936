"""The state store's transactions (db/base.py): a writing transaction begins with
``BEGIN IMMEDIATE``; a second writing transaction opened by the same thread while the
first is open fails at once (it could only wait on itself until 'database is locked')."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from akka_optimize.db.base import Database, NestedWriteError, intent


def _db(tmp_path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'state.db'}")
    with db.session() as s:
        s.execute(text("CREATE TABLE t (v INTEGER)"))
    return db


def test_a_nested_writing_transaction_fails_at_once(tmp_path, monkeypatch) -> None:
    """Refused at once, shown without a clock: the inner transaction is refused before it
    waits at the write gate (where it would wait on its own thread for the gate's 30 s,
    then SQLite's busy timeout), so the gate never sees it."""
    db = _db(tmp_path)
    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        gate, entered = db.write_gate, []
        assert gate is not None
        enter = gate.enter
        monkeypatch.setattr(gate, "enter", lambda i: (entered.append(i), enter(i))[1])
        with pytest.raises(NestedWriteError, match="already holds a writing transaction"):
            with db.session() as inner:
                inner.execute(text("SELECT 1"))
        assert entered == []  # refused before the gate, so it never waited
    with db.session() as s:  # the outer one still committed
        assert s.execute(text("SELECT v FROM t")).scalars().all() == [1]
    db.dispose()


def test_a_nested_read_and_sequential_writes_are_allowed(tmp_path) -> None:
    db = _db(tmp_path)
    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        with intent(write=False), db.session() as inner:  # WAL: reads never wait
            assert inner.execute(text("SELECT count(*) FROM t")).scalar() == 0
    for v in (2, 3):  # a committed or rolled-back transaction no longer counts
        with db.session() as s:
            s.execute(text("INSERT INTO t VALUES (:v)"), {"v": v})
    with pytest.raises(ValueError):
        with db.session() as s:
            s.execute(text("INSERT INTO t VALUES (4)"))
            raise ValueError("refused")
    with db.session() as s:
        assert sorted(s.execute(text("SELECT v FROM t")).scalars()) == [1, 2, 3]
    db.dispose()


def test_other_threads_wait_for_the_writer_instead_of_failing(tmp_path) -> None:
    db = _db(tmp_path)
    got: list[int] = []

    def writer() -> None:
        with db.session() as s:
            s.execute(text("INSERT INTO t VALUES (2)"))
            got.append(2)

    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        t = threading.Thread(target=writer)
        t.start()
        t.join(0.3)
        assert got == []  # waits on the lock, no error
    t.join(30)
    assert got == [2]
    db.dispose()


def test_a_transaction_ended_on_another_thread_does_not_count_on_the_first(tmp_path) -> None:
    """The service's request handlers begin a session's transaction on one worker thread
    and commit it on another (FastAPI runs a dependency's set-up and tear-down, and the
    handler, as separate thread-pool calls). The thread that began it may then serve the
    next request, whose write must not be refused as nested (CI stop 30: a 500
    NestedWriteError on `runs cancel`)."""
    from concurrent.futures import ThreadPoolExecutor

    db = _db(tmp_path)
    with ThreadPoolExecutor(max_workers=1) as a, ThreadPoolExecutor(max_workers=1) as b:
        s = db._sessions()

        def begin() -> None:
            s.execute(text("INSERT INTO t VALUES (1)"))

        a.submit(begin).result()
        b.submit(lambda: (s.commit(), s.close())).result()

        def next_request() -> None:
            with db.session() as s2:
                s2.execute(text("INSERT INTO t VALUES (2)"))

        # the pooled connections are busy, so the next request writes on a new one
        with intent(write=False), db.session() as r1, db.session() as r2:
            r1.execute(text("SELECT 1"))
            r2.execute(text("SELECT 1"))
            a.submit(next_request).result(timeout=10)
    with db.session() as s3:
        assert sorted(s3.execute(text("SELECT v FROM t")).scalars()) == [1, 2]
    db.dispose()


def _no_busy_wait(db: Database) -> None:
    """SQLite's busy handler off on every new connection: a writer that reached
    ``BEGIN IMMEDIATE`` while another held the lock would fail at once."""
    from sqlalchemy import event

    def _off(dbapi_conn, _record) -> None:
        dbapi_conn.execute("PRAGMA busy_timeout=0")

    event.listen(db.engine, "connect", _off)
    db.engine.dispose()


def _second_writer(db: Database, out: list[object]) -> threading.Thread:
    """A started thread that inserts 2 in its own session and appends 2, or the exception
    it met (never hidden), to ``out``."""

    def write() -> None:
        try:
            with db.session() as s:
                s.execute(text("INSERT INTO t VALUES (2)"))
            out.append(2)
        except Exception as exc:
            out.append(exc)

    t = threading.Thread(target=write)
    t.start()
    return t


def test_writers_queue_at_the_gate_not_in_sqlites_busy_handler(tmp_path) -> None:
    """Issue 14 (load): a second writer of the process waits on the WriteGate, woken when
    the first one's COMMIT has run, instead of polling in SQLite's busy handler (which
    sleeps up to 100 ms between tries). With the busy handler off, a writer that got past
    the gate early would fail with 'database is locked'."""
    db = _db(tmp_path)
    _no_busy_wait(db)
    done: list[object] = []
    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        t = _second_writer(db, done)
        t.join(0.3)
        assert done == [] and t.is_alive()  # queued at the gate, no error
    t.join(30)
    assert not t.is_alive(), "the queued writer never ran"
    assert done == [2]
    with db.session() as s:
        assert sorted(s.execute(text("SELECT v FROM t")).scalars()) == [1, 2]
    db.dispose()


def test_the_gate_opens_on_rollback_and_on_a_session_closed_mid_write(tmp_path) -> None:
    db = _db(tmp_path)
    _no_busy_wait(db)
    db.write_gate.timeout = 2.0  # a gate left shut would fail the next write in 2 s
    with pytest.raises(ValueError):
        with db.session() as s:
            s.execute(text("INSERT INTO t VALUES (1)"))
            raise ValueError("refused")
    s = db._sessions()
    s.execute(text("INSERT INTO t VALUES (2)"))
    s.close()  # neither committed nor rolled back by the caller: the pool rolls it back
    with db.session() as s:
        s.execute(text("INSERT INTO t VALUES (3)"))
    with db.session() as s:
        assert s.execute(text("SELECT v FROM t")).scalars().all() == [3]
    db.dispose()


def test_a_writer_held_past_the_gate_timeout_is_refused_with_a_sentence(tmp_path) -> None:
    from sqlalchemy.exc import OperationalError

    db = _db(tmp_path)
    db.write_gate.timeout = 0.2
    errors: list[object] = []
    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        _second_writer(db, errors).join(30)
    assert len(errors) == 1 and isinstance(errors[0], OperationalError)
    assert "database is locked: another writer of this service held it for 0.2 s" in str(errors[0])
    with db.session() as s:  # the holder's write stands and the gate is open again
        s.execute(text("INSERT INTO t VALUES (3)"))
        assert sorted(s.execute(text("SELECT v FROM t")).scalars()) == [1, 3]
    db.dispose()
