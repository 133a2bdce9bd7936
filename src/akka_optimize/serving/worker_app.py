"""The endpoint worker's HTTP routes: chat completions, models, health and adapter admin.

Request handling only; the process that loads the engine and serves this app is
:mod:`akka_optimize.serving.worker`. Every route needs ``Authorization: Bearer TOKEN`` when
the worker has a token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from .completions import complete
from .parsers import parsers_for
from .schema import OpenAIError, now
from .text_completions import complete_text
from .worker_state import WorkerState


def _error(exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def create_worker_app(state: WorkerState) -> FastAPI:
    """The worker's FastAPI app over ``state``."""
    app = FastAPI(title="akka-optimize endpoint worker")
    app.state.worker = state
    _guard(app, state)
    _serve_routes(app, state)
    _admin_routes(app, state)
    return app


def _guard(app: FastAPI, state: WorkerState) -> None:
    """The token check and the OpenAI-style answers to errors."""

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Any:
        if state.token and request.headers.get("authorization") != f"Bearer {state.token}":
            return _error(
                OpenAIError(
                    "Missing or wrong worker token.",
                    status=401,
                    code="unauthorized",
                    type="authentication_error",
                )
            )
        return await call_next(request)

    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return _error(
            OpenAIError(
                f"The endpoint failed: {type(exc).__name__}: {exc}",
                status=500,
                type="server_error",
                code="internal",
            )
        )


def _serve_routes(app: FastAPI, state: WorkerState) -> None:
    """``/health``, ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions``."""

    @app.get("/health")
    async def health() -> dict[str, Any]:
        eng = state.engine
        return {
            "state": "ready",
            "engine": eng.name,
            "architecture": eng.architecture,
            "parsers": vars(parsers_for(eng.architecture)),
            "base": state.base_name,
            "adapters": eng.adapter_names(),
            "maxContext": eng.max_context,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {
                "id": m,
                "object": "model",
                "created": now(),
                "owned_by": "akka-optimize",
                "root": state.base_name,
                "parent": None if m == state.base_name else state.base_name,
            }
            for m in state.models()
        ]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await complete(state, await _json_body(request))

    @app.post("/v1/completions")
    async def text(request: Request) -> Any:
        return await complete_text(state, await _json_body(request))


async def _json_body(request: Request) -> Any:
    """The request's JSON body (400 ``invalid_json`` when it is not JSON)."""
    try:
        return json.loads(await request.body() or b"null")
    except ValueError as exc:
        raise OpenAIError(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc


def _admin_routes(app: FastAPI, state: WorkerState) -> None:
    """What the service uses: load and drop adapters, set a model's instructions."""

    @app.post("/admin/adapters")
    async def add_adapter(body: dict[str, Any]) -> dict[str, Any]:
        name, path = body.get("name"), body.get("path")
        if not isinstance(name, str) or not isinstance(path, str):
            raise OpenAIError("name and path are required strings.", param="name")
        await run_in_threadpool(state.add_adapter, name, Path(path), body.get("instructions"))
        return {"models": state.models()}

    @app.delete("/admin/adapters/{name:path}")
    async def drop_adapter(name: str) -> dict[str, Any]:
        await run_in_threadpool(state.engine.unload_adapter, name)
        state.instructions.pop(name, None)
        return {"models": state.models()}

    @app.put("/admin/instructions")
    async def set_instructions(body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model")
        if model not in state.instructions:
            raise OpenAIError(
                f"No model {model!r} on this worker.", param="model", code="model_not_found"
            )
        state.instructions[model] = body.get("instructions")
        return {"model": model, "instructions": state.instructions[model]}
