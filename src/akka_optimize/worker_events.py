"""How a worker talks to the service: its attempt's events, with retries, following the
service to the address it published in the blob store (issue 14 item 8).

A floor below every kind of worker (:mod:`akka_optimize.jobs.worker` for the service's own
jobs, :mod:`akka_optimize.minifield.supervise` for recipe runs claimed from outside), so
each sends its events the same way without importing the jobs package.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from .errors import AkkaError
from .store import BlobStore

ADDRESS_KEY = "service/address.json"
"""The blob key where each service publishes its address at start."""


def publish_address(store: Any, url: str) -> None:
    """Record ``url`` (``http://host:port``) as the service's current address."""
    store.put_bytes(ADDRESS_KEY, json.dumps({"url": url}).encode())


def current_address(store: Any) -> str | None:
    """The address the last service to start published, or None when there is none
    (or the store cannot be read just now)."""
    try:
        url = json.loads(store.get_bytes(ADDRESS_KEY)).get("url")
    except Exception:
        return None
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


class AttemptRef(Protocol):
    """What an :class:`EventClient` needs of an attempt (a :class:`akka_optimize.jobs.spec.
    JobSpec` has it; so has :class:`Attempt`)."""

    run_id: str
    attempt: int
    callback_url: str
    token: str
    extra: dict[str, Any]


@dataclass
class Attempt:
    """An attempt a worker did not get from a job spec (a claimed recipe run): its run,
    number, the service's base URL, the attempt's worker token, and ``extra``
    (``retry_s``: the retry window in seconds)."""

    run_id: str
    attempt: int
    callback_url: str
    token: str
    extra: dict[str, Any] = field(default_factory=dict)


RETRY_FOR_S = 300
"""The default retry window (``service.workerRetrySeconds`` of the deployment file)."""


class ServiceUnreachable(RuntimeError):
    """No service answered within the retry window; the attempt ends (exit code 3)."""


class EventClient:
    """Posts events to the service; remembers the last control request (pause/cancel).

    When the service cannot be reached, the client re-reads the address the service
    published in the blob store (:func:`current_address`) and follows it, so a
    service that came back at another address gets the events. After
    ``spec.extra["retry_s"]`` seconds without an answer it raises
    :class:`ServiceUnreachable`, and every later send raises at once.
    """

    def __init__(self, spec: AttemptRef, store: BlobStore | None = None) -> None:
        self.path = f"/v1/training/runs/{spec.run_id}/attempts/{spec.attempt}/events"
        self.base = spec.callback_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {spec.token}"}
        self.store = store
        self.retry_s = float(spec.extra.get("retry_s", RETRY_FOR_S))
        self.control: str | None = None
        self.unreachable = False

    @property
    def url(self) -> str:
        """The events route at the service's current address."""
        return self.base + self.path

    def _follow(self) -> bool:
        """Switch to the address the service published, when it differs."""
        new = current_address(self.store) if self.store is not None else None
        if new and new.rstrip("/") != self.base:
            self.base = new.rstrip("/")
            return True
        return False

    def post(self, route: str, body: dict[str, Any], timeout: float = 600.0) -> httpx.Response:
        """POST ``body`` to one of this attempt's own routes (``route`` after
        ``…/attempts/N/``, such as ``judge/chat/completions``) with the attempt's token,
        following the service to a published new address on a connection error.

        Raises:
            httpx.HTTPError: the service did not answer (after following it once).
        """
        for _ in range(2):
            url = self.base + self.path.removesuffix("events") + route
            try:
                return httpx.post(url, json=body, headers=self.headers, timeout=timeout)
            except httpx.TransportError:
                if not self._follow():
                    raise
        return httpx.post(url, json=body, headers=self.headers, timeout=timeout)

    def send(self, event: dict[str, Any]) -> None:
        """Deliver ``event``; retry connection errors and 5xx for ``retry_s`` seconds."""
        if self.unreachable:
            raise ServiceUnreachable(f"the service at {self.base} is unreachable")
        deadline = time.monotonic() + self.retry_s
        delay = 0.5
        while True:
            try:
                r = httpx.post(self.url, json=event, headers=self.headers, timeout=60)
                if r.status_code < 500:
                    if r.status_code == 200:
                        self.control = (r.json() or {}).get("control")
                    elif r.status_code in (404, 409, 410):
                        self.control = "cancel"  # the run no longer accepts this attempt
                    return
            except httpx.HTTPError:
                pass
            if self._follow():
                continue
            if time.monotonic() > deadline:
                self.unreachable = True
                raise ServiceUnreachable(
                    f"no service answered at {self.base} (nor at an address published in "
                    f"the blob store) for {self.retry_s:g} s"
                )
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def failure_sentence(exc: BaseException) -> str:
    """One sentence a user can act on (seeds/000 "Failure reporting")."""
    if isinstance(exc, AkkaError):
        return exc.message
    if isinstance(exc, MemoryError):
        return (
            "The run ran out of host memory; a smaller config.hyperparams.training.microBatchPerGpu "
            "or config.maxSeqLength uses less."
        )
    return f"The worker failed: {type(exc).__name__}: {exc}"
