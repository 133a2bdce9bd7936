"""Routes an API worker hands to the controller (``server start --workers N``, N > 1).

With several API processes over one state store, most routes read and write the store
only and any process answers them. A few act on state that lives in one process, the
controller's (:mod:`akka_optimize.service.supervisor`):

- the Tinker protocol (``/api/v1/…``) and a Tinker worker's poll
  (``…/attempts/{n}/tinker/next``): the broker's futures and per-model queues are
  asyncio objects of one event loop (:mod:`akka_optimize.tinker.broker`);
- endpoints (``/v1/training/endpoints…``), OpenAI chat completions
  (``/v1/chat/completions``), graders (``/v1/fine_tuning/alpha/graders…``) and an
  evaluation worker's judge (``…/attempts/{n}/judge…``): the endpoint manager holds the
  endpoint workers' handles, their queue lines and in-flight counts;
- base models (``/v1/training/base-models…``): their fetch subprocesses;
- ``/v1/training/info``: ``startedCompletely`` and a start-up failure are the
  controller's (its hooks start the scheduler and the managers; a worker starts nothing).

An API worker forwards these requests unchanged (method, path, query, headers, body,
streamed both ways) to the controller on its loopback address and streams the answer
back; the controller authenticates and checks them as the single process does. While
the controller restarts, its listening socket (held by the supervisor) queues the
connection, so a forwarded request waits instead of failing. Everything else (queued
runs, cancel and pause, which are rows of the store the scheduler reads on its next
pass) is answered by the worker itself.
"""

from __future__ import annotations

import re

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTROLLER_PATHS = re.compile(
    r"^(/api/v1/"
    r"|/v1/training/endpoints(/|$)"
    r"|/v1/chat/completions$"
    r"|/v1/fine_tuning/alpha/graders(/|$)"
    r"|/v1/training/base-models(/|$)"
    r"|/v1/training/info$"
    r"|/v1/training/runs/[^/]+/attempts/[^/]+/(tinker|judge)(/|$))"
)
"""The paths whose state lives in the controller's process (module docstring)."""

_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"te", b"trailer"}


def needs_controller(path: str) -> bool:
    """Whether an API worker forwards a request for ``path`` to the controller."""
    return CONTROLLER_PATHS.match(path) is not None


class ControllerProxy:
    """ASGI middleware of an API worker: requests for :data:`CONTROLLER_PATHS` go to the
    controller at ``url`` (``http://127.0.0.1:PORT``), the rest to ``app``.

    No timeout on reading the answer (a Tinker long poll waits 25 s, a streamed chat
    completion as long as it generates); connecting waits up to 60 s (a controller
    restarting). A controller that cannot be reached is answered 503 with
    ``Retry-After`` in the API's error shape."""

    def __init__(self, app: ASGIApp, url: str) -> None:
        self.app = app
        self.url = url.rstrip("/")
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.url,
                timeout=httpx.Timeout(connect=60.0, read=None, write=60.0, pool=None),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not needs_controller(scope["path"]):
            await self.app(scope, receive, send)
            return
        await self._forward(scope, receive, send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body():
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                chunk = msg.get("body", b"")
                if chunk:
                    yield chunk
                if not msg.get("more_body", False):
                    return

        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP]
        path = scope.get("raw_path") or scope["path"].encode()
        target = path.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        request = self._http().build_request(
            scope["method"], target, headers=headers, content=body()
        )
        try:
            answer = await self._http().send(request, stream=True)
        except httpx.HTTPError as exc:
            await _unavailable(send, f"{type(exc).__name__}: {exc}")
            return
        try:
            out = [(k.lower(), v) for k, v in answer.headers.raw if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": answer.status_code,
                        "headers": out})  # fmt: skip
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await answer.aclose()


async def _unavailable(send: Send, why: str) -> None:
    import json

    body = json.dumps(
        {
            "error": {
                "code": "unavailable",
                "message": f"The service's controller process did not answer ({why}); "
                "retry in a few seconds.",
                "field": None,
            }
        }
    ).encode()
    start: Message = {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"retry-after", b"2"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})
