"""The endpoint worker process: ``python -m akka_optimize.serving.worker --spec FILE``.

One worker holds one resident base model and any number of its adapters behind a
serving engine (DESIGN.md "Where a run executes": the service never runs models
in its own process). It listens on a free loopback port and answers:

- ``POST /v1/chat/completions`` and ``GET /v1/models`` (OpenAI-compatible; the
  ``model`` field names the base model or an adapter);
- ``GET /health``; ``POST /admin/adapters`` (load), ``DELETE /admin/adapters/{name}``,
  ``PUT /admin/instructions`` — used by the service.

Every route needs ``Authorization: Bearer $AKKA_SERVING_TOKEN`` when that variable
is set. While it starts, the worker writes its progress as JSON to ``--status-file``
(``{"phase": "loading"|"ready"|"failed", "message", "port", "pid"}``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from .completions import complete
from .engine import ServingEngine, adapter_rank, make_engine
from .parsers import parsers_for
from .schema import OpenAIError, now


class WorkerState:
    """The engine plus the names and instructions of the models it serves.

    ``base_name`` is the base model's served name; ``instructions`` maps a served
    model name to its training instructions (None when it has none).
    """

    def __init__(
        self, engine: ServingEngine, base_name: str, *, max_rank: int, token: str | None
    ) -> None:
        self.engine = engine
        self.base_name = base_name
        self.max_rank = max_rank
        self.token = token
        self.instructions: dict[str, str | None] = {base_name: None}

    def models(self) -> list[str]:
        """Served model names: the base first, then the adapters."""
        return [self.base_name] + self.engine.adapter_names()

    def add_adapter(self, name: str, path: Path, instructions: str | None) -> None:
        """Load adapter ``name`` from ``path``.

        Raises:
            OpenAIError: the folder is not a PEFT adapter, or its rank is above the limit.
        """
        try:
            rank = adapter_rank(path)
        except ValueError as exc:
            raise OpenAIError(str(exc), param="path", code="invalid_adapter") from exc
        if rank > self.max_rank:
            raise OpenAIError(
                f"The adapter {name} has rank {rank}, above the largest rank this endpoint "
                f"loads ({self.max_rank}).",
                param="path",
                code="rank_too_large",
            )
        self.engine.load_adapter(name, path)
        self.instructions[name] = instructions


def _error(exc: OpenAIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def create_worker_app(state: WorkerState) -> FastAPI:
    """The worker's FastAPI app over ``state``."""
    app = FastAPI(title="akka-optimize endpoint worker")
    app.state.worker = state

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
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as exc:
            raise OpenAIError(
                f"The request body is not valid JSON: {exc}", code="invalid_json"
            ) from exc
        return await complete(state, body)

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

    return app


def _write_status(path: Path | None, **fields: Any) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Load the models named in ``--spec`` and serve until stopped.

    The spec is JSON: ``{"base": {"name", "dir", "instructions"}, "adapters":
    [{"name", "path", "instructions"}], "engine", "maxContext", "maxAdapters",
    "maxRank", "mergeAdapters", "host", "port"}`` (port 0 picks a free one).
    """
    ap = argparse.ArgumentParser(prog="python -m akka_optimize.serving.worker")
    ap.add_argument("--spec", required=True, type=Path)
    ap.add_argument("--status-file", type=Path, default=None)
    args = ap.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    status = args.status_file

    def say(msg: str) -> None:
        _write_status(status, phase="loading", message=msg)

    try:
        import uvicorn

        engine = make_engine(
            spec.get("engine", "transformers"),
            Path(spec["base"]["dir"]),
            max_context=int(spec.get("maxContext", 8192)),
            max_adapters=int(spec.get("maxAdapters", 8)),
            max_rank=int(spec.get("maxRank", 64)),
            merge_adapters=bool(spec.get("mergeAdapters", True)),
            progress=say,
        )
        state = WorkerState(
            engine,
            spec["base"]["name"],
            max_rank=int(spec.get("maxRank", 64)),
            token=os.environ.get("AKKA_SERVING_TOKEN") or None,
        )
        state.instructions[state.base_name] = spec["base"].get("instructions")
        for a in spec.get("adapters", []):
            say(f"loading the adapter {a['name']}")
            state.add_adapter(a["name"], Path(a["path"]), a.get("instructions"))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((spec.get("host", "127.0.0.1"), int(spec.get("port", 0))))
        sock.listen(64)
        port = sock.getsockname()[1]
        app = create_worker_app(state)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    except Exception as exc:
        msg = exc.message if isinstance(exc, OpenAIError) else f"{type(exc).__name__}: {exc}"
        _write_status(status, phase="failed", message=msg)
        print(f"endpoint worker failed to start: {msg}", file=sys.stderr)
        return 1
    _write_status(status, phase="ready", message=f"ready on port {port}", port=port)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
