"""The routes' answer path: a view's JSON written once, without FastAPI's generic encoder.

A route of this service builds its answer as plain JSON values (``dict``/``list``/``str``/
numbers/``None``, issue 14 "Load in make bench"). FastAPI would still walk every value of
it with ``jsonable_encoder`` before ``JSONResponse`` serialises it again; on the list
routes that walk was 40 % of a request's CPU time. :class:`JsonRoute` serialises such an
answer directly, byte for byte what ``JSONResponse`` renders, with the route's status
code. An answer that is not plain JSON (a datetime, a pydantic model, a NaN) goes the
generic way, so nothing a route returns changes meaning.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.responses import Response

__all__ = ["JsonRoute", "json_answer"]


def json_answer(result: Any, status_code: int) -> Any:
    """``result`` as an ``application/json`` response with ``status_code``, serialised as
    Starlette's ``JSONResponse`` does (UTF-8, compact separators, NaN refused); a
    ``Response`` is returned unchanged, and so is anything ``json.dumps`` cannot write
    (for FastAPI's own encoder)."""
    if isinstance(result, Response):
        return result
    try:
        body = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return result
    return Response(body.encode("utf-8"), status_code=status_code, media_type="application/json")


class JsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoint's plain-JSON answer skips ``jsonable_encoder``
    (module docstring). The endpoint keeps its signature, docstring and name (the
    dependencies and the OpenAPI document read them through ``__wrapped__``)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        status = kwargs.get("status_code") or 200
        if inspect.iscoroutinefunction(endpoint):

            @functools.wraps(endpoint)
            async def answer(*args: Any, **kw: Any) -> Any:
                return json_answer(await endpoint(*args, **kw), status)

        elif inspect.isfunction(endpoint) and not inspect.isgeneratorfunction(endpoint):

            @functools.wraps(endpoint)
            def answer(*args: Any, **kw: Any) -> Any:
                return json_answer(endpoint(*args, **kw), status)

        else:
            answer = endpoint
        super().__init__(path, answer, **kwargs)
