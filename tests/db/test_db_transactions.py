"""The state store's transactions (db/base.py): a writing transaction begins with
``BEGIN IMMEDIATE``; a second writing transaction opened by the same thread while the
first is open fails at once (it could only wait on itself until 'database is locked')."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from akka_optimize.db.base import Database, NestedWriteError, intent


def _db(tmp_path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'state.db'}")
    with db.session() as s:
        s.execute(text("CREATE TABLE t (v INTEGER)"))
    return db


def test_a_nested_writing_transaction_fails_at_once(tmp_path) -> None:
    db = _db(tmp_path)
    with db.session() as outer:
        outer.execute(text("INSERT INTO t VALUES (1)"))
        started = time.monotonic()
        with pytest.raises(NestedWriteError, match="already holds a writing transaction"):
            with db.session() as inner:
                inner.execute(text("SELECT 1"))
        assert time.monotonic() - started < 5  # not the 30 s busy timeout
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
