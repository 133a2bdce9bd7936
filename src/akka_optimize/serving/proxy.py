"""The local OpenAI-compatible proxy of ``training endpoints proxy`` (seeds/000).

A small ASGI app in the CLI process: every request under ``/v1/…`` is forwarded to
the endpoint's OpenAI routes on the service (``…/endpoints/{id}/openai/v1/…``) with the
user's token added, and streamed answers pass through as they arrive, so an
application needs only ``base_url``. No model code is imported here.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_HOP = {
    "host",
    "content-length",
    "authorization",
    "connection",
    "transfer-encoding",
    "accept-encoding",
}


def build_proxy_app(target: str, headers: dict[str, str]) -> Starlette:
    """An ASGI app forwarding ``/v1/PATH`` to ``target + /v1/PATH``.

    Args:
        target: the endpoint's OpenAI root on the service, without ``/v1``.
        headers: added to every forwarded request (the user's ``Authorization``).
    """
    client = httpx.AsyncClient(timeout=httpx.Timeout(900, connect=10))

    async def forward(request: Request) -> Any:
        url = f"{target}/v1/{request.path_params['path']}"
        fwd = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        fwd.update(headers)
        req = client.build_request(
            request.method,
            url,
            params=request.query_params,
            content=await request.body(),
            headers=fwd,
        )
        try:
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as exc:
            msg = {
                "error": {
                    "message": f"The proxy cannot reach {target}: {exc}",
                    "type": "proxy_error",
                    "param": None,
                    "code": "unreachable",
                }
            }
            import json

            return Response(json.dumps(msg), status_code=502, media_type="application/json")
        ctype = resp.headers.get("content-type", "application/json")
        if ctype.startswith("text/event-stream"):

            async def relay() -> Any:
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()

            return StreamingResponse(relay(), status_code=resp.status_code, media_type=ctype)
        body = await resp.aread()
        await resp.aclose()
        return Response(body, status_code=resp.status_code, media_type=ctype)

    routes = [Route("/v1/{path:path}", forward, methods=["GET", "POST", "DELETE", "PUT"])]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        yield
        await client.aclose()

    return Starlette(routes=routes, lifespan=lifespan)
