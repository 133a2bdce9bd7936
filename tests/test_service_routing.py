"""The routes' answer path (service/routing.py, issue 14 load): a plain-JSON answer is
written once, byte for byte what FastAPI's generic path answers, without walking it
through ``jsonable_encoder``; anything else still goes the generic way."""

from __future__ import annotations

import datetime as dt
from typing import Any

import fastapi.routing
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient

from akka_optimize.service.routers import ROUTERS
from akka_optimize.service.routing import JsonRoute

ANSWER = {"name": "données/ü", "n": [1, 2.5, None, True], "nested": {"k": {"x": "é\u2028"}}}


def _app(route_class: type) -> FastAPI:
    router = APIRouter(route_class=route_class)

    @router.get("/plain", response_model=None)  # as answers() declares them
    def plain(q: int = 1) -> dict[str, Any]:
        return {**ANSWER, "q": q}

    @router.post("/made", status_code=201, response_model=None)
    async def made() -> dict[str, Any]:
        return ANSWER

    @router.get("/when", response_model=None)
    def when() -> dict[str, Any]:
        return {"at": dt.datetime(2026, 12, 4, 22, 0, tzinfo=dt.UTC)}

    @router.get("/text")
    def text() -> PlainTextResponse:
        return PlainTextResponse("ok", status_code=202)

    app = FastAPI()
    app.include_router(router)
    return app


def test_answers_equal_fastapis_generic_path_byte_for_byte() -> None:
    fast, generic = TestClient(_app(JsonRoute)), TestClient(_app(fastapi.routing.APIRoute))
    for method, path in (
        ("GET", "/plain?q=7"),
        ("POST", "/made"),
        ("GET", "/when"),
        ("GET", "/text"),
    ):
        a, b = fast.request(method, path), generic.request(method, path)
        assert (a.status_code, a.content, a.headers["content-type"]) == (
            b.status_code,
            b.content,
            b.headers["content-type"],
        ), path
    assert fast.post("/made").status_code == 201
    assert fast.get("/when").json() == {"at": "2026-12-04T22:00:00+00:00"}


def test_plain_json_skips_the_generic_encoder(monkeypatch) -> None:
    client = TestClient(_app(JsonRoute))

    def refuse(*_a, **_k):
        raise AssertionError("jsonable_encoder was called")

    monkeypatch.setattr(fastapi.routing, "jsonable_encoder", refuse)
    assert client.get("/plain").json() == {**ANSWER, "q": 1}
    with pytest.raises(AssertionError, match="jsonable_encoder was called"):
        client.get("/when")  # not plain JSON: the generic path, which is still used


def test_every_service_route_answers_through_json_route() -> None:
    from akka_optimize.service.routers import health
    from akka_optimize.service.routers.tinker import protocol as tinker
    from akka_optimize.service.routers.tinker import rest as tinker_rest
    from akka_optimize.service.routers.tinker import sampling as tinker_sampling
    from akka_optimize.service.routers.tinker import worker as tinker_worker

    mods = [*ROUTERS, health, tinker, tinker_rest, tinker_sampling, tinker_worker]
    routers = [m.router for m in mods] + [health.public_router]
    plain = [
        f"{r.path} ({type(r).__name__})"
        for router in routers
        for r in router.routes
        if isinstance(r, fastapi.routing.APIRoute) and not isinstance(r, JsonRoute)
    ]
    assert plain == [], "routers built without route_class=JsonRoute"
    assert sum(len(router.routes) for router in routers) > 100
