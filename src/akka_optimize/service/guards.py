"""ASGI middleware applied to every request before any route sees it.

- Reading requests (GET, HEAD, OPTIONS) mark their unit of work read-only
  (:data:`akka_optimize.db.base.write_intent`), so on SQLite they never take the
  write lock; every other request writes in one ``BEGIN IMMEDIATE`` transaction.
- A JSON body (``Content-Type: application/json``) is decoded and checked once by
  :func:`akka_optimize.jsonvalues.loads` — nesting, non-finite numbers, 64-bit
  whole numbers, lone surrogates — and refused with 400 and the error shape
  naming the field, before FastAPI or a route decodes it again. The OpenAI
  routes of an endpoint check their own body (they answer in OpenAI's shape).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..db.base import write_intent
from ..errors import InvalidRequest
from ..jsonvalues import loads

_READING = frozenset({"GET", "HEAD", "OPTIONS"})


def _is_json(scope: Scope) -> bool:
    for key, value in scope.get("headers", []):
        if key == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


async def _refuse(send: Send, exc: InvalidRequest) -> None:
    body = json.dumps({"error": exc.to_dict()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": exc.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """Sets the write intent of the request and checks its JSON body (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        token = write_intent.set(method not in _READING)
        try:
            if method in _READING or not _is_json(scope) or "/openai/" in scope.get("path", ""):
                await self.app(scope, receive, send)
                return
            chunks: list[bytes] = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            raw = b"".join(chunks)
            if raw.strip():
                try:
                    loads(raw)
                except InvalidRequest as exc:
                    await _refuse(send, exc)
                    return
            await self.app(scope, _replay(raw, receive), send)
        finally:
            write_intent.reset(token)


def _replay(raw: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return again


def install(app: Any) -> None:
    """Add :class:`RequestGuard` to a FastAPI/Starlette ``app``."""
    app.add_middleware(RequestGuard)
