"""The service's side of a Tinker training client: futures and the per-model queue.

A training client is a run (method ``tinker``) whose worker holds one engine training
session (:mod:`akka_optimize.tinker.worker`). The service never trains: each protocol call
becomes an *item* queued for that run's worker, in ``seq_id`` order
(TINKER-PROTOCOL.md §3.5: requests travel on separate connections, so seq 3 may arrive
before seq 1; an item is released to the worker only when every lower seq_id has been),
and the caller gets a future at once. The worker long-polls for its next item and posts
the item's result with the next poll; ``retrieve_future`` long-polls the future.

A request whose ``(model_id, seq_id)`` was already accepted (the SDK's retry after a lost
answer) returns the first future: it is never applied twice. Everything here lives on the
service's event loop (asyncio); it is lost when the service restarts, and the worker,
whose polls then find no model, ends its run with a sentence.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

POLL_SECONDS = 25.0
"""How long one ``retrieve_future`` or worker poll waits (the SDK gives up at 45 s)."""
KEEP_SECONDS = 600.0
"""How long a finished future's result is kept for the client to retrieve."""


@dataclass
class Future:
    """One accepted request: ``type`` names its result model; ``result`` is the JSON the
    worker answered (or the service decided), ``error`` a sentence."""

    request_id: str
    model_id: str
    type: str
    project: str
    """The project of the client that made it: only that project's keys retrieve it."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: dict[str, Any] | None = None
    error: str | None = None
    category: str = "user"
    done_at: float = 0.0


@dataclass
class Model:
    """One training client: its run, its seq_id bookkeeping and its worker's queue."""

    model_id: str
    run_id: str
    project: str
    base_model: str
    rank: int
    info: dict[str, Any]
    next_seq: int = 1
    buffered: dict[int, dict[str, Any]] = field(default_factory=dict)
    seen: dict[int, str] = field(default_factory=dict)
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    taken: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready: bool = False
    last_call: float = field(default_factory=time.monotonic)
    sampler: str | None = None
    """A sampling client's ``model_path`` or base model (None: a training client)."""


@dataclass
class Session:
    """A ``create_session``: its tags and counters."""

    session_id: str
    project: str
    tags: list[str]
    metadata: dict[str, Any]
    beat: float = field(default_factory=time.monotonic)
    """When (``time.monotonic()``) the SDK last sent ``session_heartbeat`` (or created it)."""


class Broker:
    """Sessions, models and futures of the Tinker protocol (one per service)."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, Model] = {}
        self.by_run: dict[str, str] = {}
        self.futures: dict[str, Future] = {}
        self.samplers: dict[str, tuple[str, int]] = {}
        """sampling_session_id → (model_id, the training step its weights are)."""

    # ------------------------------------------------------------ futures
    def new_future(self, model_id: str, type_: str, project: str) -> Future:
        """A pending future of result type ``type_`` of a client of ``project``."""
        now = time.monotonic()
        for rid, old in list(self.futures.items()):  # results nobody came back for
            if old.done.is_set() and now - old.done_at > KEEP_SECONDS:
                del self.futures[rid]
        fut = Future("req-" + uuid.uuid4().hex[:16], model_id, type_, project)
        self.futures[fut.request_id] = fut
        return fut

    def resolve(self, request_id: str, result: dict[str, Any] | None, error: str | None) -> None:
        """Complete a future with ``result`` or the sentence ``error`` (once)."""
        fut = self.futures.get(request_id)
        if fut is None or fut.done.is_set():
            return
        fut.result, fut.error, fut.done_at = result, error, time.monotonic()
        fut.done.set()

    def fail_model(self, model_id: str, reason: str) -> None:
        """Fail every unfinished future of ``model_id`` (its run ended)."""
        for fut in list(self.futures.values()):
            if fut.model_id == model_id and not fut.done.is_set():
                fut.category = "server"
                self.resolve(fut.request_id, None, reason)

    # ------------------------------------------------------------ ordering
    def submit(self, model: Model, seq_id: int | None, op: str, body: dict[str, Any]) -> Future:
        """Accept training call ``op`` with ``seq_id`` for ``model``; returns its future.

        A seq_id seen before returns that call's future; items are released to the worker
        in seq_id order (a missing seq_id holds every later one back).
        """
        model.last_call = time.monotonic()
        if seq_id is not None and seq_id in model.seen:
            first = self.futures.get(model.seen[seq_id])
            if first is not None:
                return first
            fut = self.new_future(
                model.model_id, op, model.project
            )  # never applied twice, even then
            self.resolve(fut.request_id, None, f"seq_id {seq_id} was answered long ago.")
            return fut
        fut = self.new_future(model.model_id, op, model.project)
        item = {"request_id": fut.request_id, "op": op, "body": body}
        if seq_id is None:
            model.queue.put_nowait(item)
            return fut
        model.seen[seq_id] = fut.request_id
        model.buffered[seq_id] = item
        while model.next_seq in model.buffered:
            model.queue.put_nowait(model.buffered.pop(model.next_seq))
            model.next_seq += 1
        return fut

    async def next_item(self, model: Model, timeout: float = POLL_SECONDS) -> dict | None:
        """The worker's next item (held as taken until its result comes), or None after
        ``timeout`` seconds without one."""
        try:
            item = await asyncio.wait_for(model.queue.get(), timeout)
        except TimeoutError:
            return None
        model.taken[item["request_id"]] = item
        return item

    def finish_item(self, model: Model, request_id: str, result: Any, error: Any) -> None:
        """The worker's answer to a taken item."""
        model.taken.pop(request_id, None)
        self.resolve(request_id, result, error)

    async def wait(self, fut: Future, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``fut``; whether it is done."""
        try:
            await asyncio.wait_for(fut.done.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def silent_for(self, model: Model) -> float | None:
        """Seconds since the last heartbeat of ``model``'s session (its id's first part);
        None when the session is not known (finished, or the service restarted)."""
        sess = self.sessions.get(model.model_id.split(":", 1)[0])
        return None if sess is None else time.monotonic() - sess.beat

    def drop(self, model: Model, reason: str) -> None:
        """Forget ``model`` (its worker is told to end) and fail its pending futures with
        the sentence ``reason``."""
        self.models.pop(model.model_id, None)
        self.by_run.pop(model.run_id, None)
        self.fail_model(model.model_id, reason)

    def model_of(self, model_id: str) -> Model | None:
        """The model ``model_id``, or None."""
        return self.models.get(model_id)


class BrokerContext(Protocol):
    """The part of the service's context the Tinker routes read: its broker."""

    tinker_broker: Broker


def broker_of(ctx: BrokerContext) -> Broker:
    """The service's broker (built with its context,
    :class:`akka_optimize.core.context.ServiceContext`)."""
    return ctx.tinker_broker
