"""A size limit on JSON request bodies (issue 14 item 3).

Every request except the streamed uploads (``POST /v1/registry/{datasets,bundles,models,
adapter-imports}/NS/NAME``, ``POST /v1/registry/images`` and OpenAI's ``POST /v1/files``,
which spool to disk under their own
``limits.*`` of the deployment file) has its body read here, at most
``service.jsonBodyBytes`` bytes (8 MiB by default). A longer body — declared by
``Content-Length`` or found while receiving — is answered ``413 too_large`` naming the
limit, before any route parses it; so a route never holds more than the limit.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

UPLOAD_ROUTES = re.compile(
    r"^/v1/(?:registry/(?:(?:datasets|bundles|models|adapter-imports)/[^/]+/[^/]+|images)|files)/?$"
)
"""``POST`` paths whose bodies stream to a spool file under their own limits."""


def _refusal(limit: int) -> JSONResponse:
    message = (
        f"The request body is larger than the limit of {limit:,} bytes for JSON bodies "
        "(service.jsonBodyBytes in the deployment file)."
    )
    body = {"error": {"code": "too_large", "message": message, "field": "body"}}
    return JSONResponse(body, status_code=413, headers={"Connection": "close"})


class JsonBodyLimit:
    """ASGI middleware: refuse request bodies over ``limit_of()`` bytes with 413.

    Args:
        app: the ASGI app it wraps.
        limit_of: returns the current limit in bytes (read from the deployment file, so
            a changed file takes effect without a restart).
    """

    def __init__(self, app: Any, limit_of: Callable[[], int]) -> None:
        self.app = app
        self.limit_of = limit_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope.get("method") == "POST" and UPLOAD_ROUTES.match(scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        limit = self.limit_of()
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > limit:
            await _refusal(limit)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refusal(limit)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
