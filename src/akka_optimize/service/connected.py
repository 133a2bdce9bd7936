"""Work a request computes stops when its client leaves (issue 14 item 3).

:func:`while_connected` runs a computation in a worker thread inside a
:func:`akka_optimize.cancel.scope` and watches the connection meanwhile; when the client
disconnects it sets the scope's event, so the computation stops at its next
:func:`akka_optimize.cancel.check` (between batches of rows) instead of finishing for
nobody. Dry runs (their dataset findings) and data previews use it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from .. import cancel

log = logging.getLogger(__name__)
T = TypeVar("T")
POLL_S = 0.25
"""How often (seconds) the connection is checked while the work runs."""


async def while_connected(request: Request, what: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread, stopped when the client of ``request`` disconnects.

    Args:
        request: the request whose body has been read (its receive channel then
            carries only the disconnect).
        what: what the work is, for the log (``"dry run"``, ``"data preview"``).
        fn: the computation; it calls :func:`akka_optimize.cancel.check` between batches.

    Raises:
        akka_optimize.cancel.ClientGone: the client left and the work stopped (nobody
            reads the answer; the service answers 499).
    """
    event = threading.Event()

    def work() -> T:
        with cancel.scope(event):
            return fn()

    task = asyncio.ensure_future(run_in_threadpool(work))
    while not task.done():
        await asyncio.wait({task}, timeout=POLL_S)
        if not task.done() and not event.is_set() and await request.is_disconnected():
            log.warning("the client of a %s left; stopping it", what)
            event.set()
    try:
        return task.result()
    except cancel.ClientGone:
        log.warning("a %s stopped: its client left", what)
        raise
