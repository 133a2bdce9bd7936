"""Stopping work whose client has gone (issue 14 item 3: "Stop work whose client has
gone").

A request's long computation (a dry run's dataset findings, a data preview) runs in a
worker thread. The route sets a :class:`threading.Event` for it with :func:`scope` and
sets the event when the client disconnects; the computation calls :func:`check` between
batches of rows and stops with :class:`ClientGone`. Code outside such a scope (a run's
worker, tests) never stops: :func:`check` does nothing there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_EVENT: ContextVar[threading.Event | None] = ContextVar("akka_optimize_cancel", default=None)


class ClientGone(Exception):
    """The client of the request this work answers has disconnected."""


@contextmanager
def scope(event: threading.Event) -> Iterator[None]:
    """Within the block (in this thread), :func:`check` raises once ``event`` is set."""
    token = _EVENT.set(event)
    try:
        yield
    finally:
        _EVENT.reset(token)


def check() -> None:
    """Raise :class:`ClientGone` when the current request's client has gone.

    Raises:
        ClientGone: the event of the enclosing :func:`scope` is set.
    """
    event = _EVENT.get()
    if event is not None and event.is_set():
        raise ClientGone()
