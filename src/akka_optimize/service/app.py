"""The app factory: ``create_app(settings)`` builds one service with its own state.

Start-up runs in a background thread so ``/healthz`` answers at once and
``GET /v1/training/info`` can report ``startedCompletely: false`` until the
migrations and every router's ``on_startup`` hook have finished
(seeds/000 "Failure reporting").
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError, OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..cancel import ClientGone
from ..core.auth import authenticate
from ..core.context import ServiceContext
from ..db.migrate import upgrade
from ..deployment import ServiceLimits, load_deployment
from ..errors import AkkaError, Unavailable
from ..settings import Settings
from ..ui import Dashboard
from . import runtime
from .bodylimit import JsonBodyLimit
from .deps import get_principal
from .guards import install as install_guards
from .metrics import RequestTimer
from .openapi import install as install_openapi
from .routers import ROUTERS, health
from .routers.registry import routes as registry
from .routers.tinker import worker as tinker_worker

_ONCE_PER_START = (registry,)
"""Routers whose ``on_startup`` belongs to :func:`prepare_home` (registry: upload spools)."""

log = logging.getLogger("akka_optimize.service")


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    details: Any = None,
) -> JSONResponse:
    """The one error shape of the API: ``{"error": {"code", "message", "field"}}``."""
    body: dict[str, Any] = {"code": code, "message": message, "field": field}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _loc_to_field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts)


ROLES = ("all", "api", "controller")
"""What one process of the service does (``server start --workers N``): ``all`` is the
single process (N = 1); ``api`` answers requests only, starting nothing (it forwards the
controller's routes, :mod:`.controller_proxy`); ``controller`` runs every start-up hook
(the scheduler, executors, endpoint and base-model managers) but the once-per-start ones
the supervisor ran before any process started (:func:`prepare_home`)."""


def prepare_home(ctx: ServiceContext) -> None:
    """What happens once when the service starts, before any request: folders, migrations,
    a private state file, and the removal of what a previous service left half-written
    (temporary blobs, upload spools). With several processes the supervisor runs it before
    starting them: a restarted controller must not remove what a live API worker writes."""
    ctx.settings.ensure_dirs()
    upgrade(ctx.settings.database_url or "")
    _make_private(ctx.settings.database_url or "")
    ctx.store.sweep_tmp()
    for mod in ROUTERS:
        hook = getattr(mod, "on_startup", None)
        if hook is not None and mod in _ONCE_PER_START:
            hook(ctx)


def _startup(ctx: ServiceContext, role: str = "all") -> None:
    try:
        if ctx.settings.startup_delay_s:
            time.sleep(ctx.settings.startup_delay_s)
        if role == "all":
            prepare_home(ctx)
        else:
            ctx.settings.ensure_dirs()
        for mod in ROUTERS if role != "api" else ():
            hook = getattr(mod, "on_startup", None)
            if hook is not None and mod not in _ONCE_PER_START:
                hook(ctx)
        if role != "api":
            runtime.start(ctx)  # the executor and the scheduler, once (the controller's)
        # What start-up built (modules, the catalog, the app) lives as long as the service:
        # moved out of the collector's reach, a full collection scans only what requests
        # made since, not the whole heap (under load it paused every thread for 75-105 ms
        # a few times a minute; issue 14, load). The lifespan's end gives them back.
        gc.collect()
        gc.freeze()
        ctx.started.set()
        log.info("service started completely")
    except Exception as exc:  # reported by /v1/training/info
        log.exception("start-up failed")
        ctx.startup_error = f"The service did not start completely: {exc}"


def _shutdown(ctx: ServiceContext, role: str = "all") -> None:
    if role != "api":
        try:
            runtime.stop(ctx)
        except Exception:
            log.exception("stopping the scheduler failed")
    for mod in ROUTERS if role != "api" else ():
        hook = getattr(mod, "on_shutdown", None)
        if hook is not None:
            try:
                hook(ctx)
            except Exception:
                log.exception("shutdown hook of %s failed", mod.__name__)
    runtime.close(ctx)


def _make_private(url: str) -> None:
    """Mode 0600 for a local SQLite state file and its WAL companions."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        for p in (path, path + "-wal", path + "-shm"):
            if os.path.exists(p):
                os.chmod(p, 0o600)


def create_app(
    settings: Settings | None = None, role: str = "all", controller_url: str | None = None
) -> FastAPI:
    """Build the service app for ``settings`` (from the environment when omitted).

    ``role`` is one of :data:`ROLES` (``all``, the single process, by default); an ``api``
    process forwards the controller's routes to ``controller_url``
    (``http://127.0.0.1:PORT``, required with ``api``). Raises ValueError naming the
    argument otherwise."""
    if role not in ROLES:
        raise ValueError(f"role: {role!r} is not one of {', '.join(ROLES)}.")
    if role == "api" and not controller_url:
        raise ValueError("controller_url: an api process needs the controller's address.")
    settings = settings or Settings.from_env()
    ctx = runtime.build_context(settings)  # the job kinds are registered here

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        t = threading.Thread(target=_startup, args=(ctx, role), name="startup", daemon=True)
        t.start()
        yield
        # The hooks stop workers and record their state: in the thread pool, since a
        # state-store session may not block the event loop (db.base.LoopBlockingError).
        await run_in_threadpool(_shutdown, ctx, role)
        gc.unfreeze()

    # /openapi.json, /docs and /redoc are served by routers.docs, behind the token.
    app = FastAPI(
        title="akka-optimize",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.ctx = ctx

    _install_error_handlers(app)

    app.include_router(health.public_router)
    # the dashboard's pages check the token themselves, with the service's own check
    app.include_router(Dashboard(authenticate).router)
    for mod in ROUTERS:
        app.include_router(mod.router, dependencies=[Depends(get_principal)])
    # The Tinker SDK's protocol (X-API-Key) and its workers' poll (a worker's own token):
    # another API's shapes (protobuf, 408 long polls), documented in TINKER-PROTOCOL.md and
    # the README, so left out of this service's OpenAPI document.
    from .routers.tinker import protocol as tinker  # lazy: numpy
    from .routers.tinker import rest as tinker_rest  # lazy: numpy
    from .routers.tinker import sampling as tinker_sampling  # lazy: numpy

    app.include_router(tinker.router, include_in_schema=False)
    app.include_router(tinker_sampling.router, include_in_schema=False)
    app.include_router(tinker_rest.router, include_in_schema=False)
    app.include_router(tinker_worker.router, include_in_schema=False)
    app.add_middleware(JsonBodyLimit, limit_of=lambda: _json_body_limit(settings))
    install_guards(app)
    install_openapi(app)
    app.add_middleware(RequestTimer)  # outermost but Starlette's own: times every answer
    if role == "api":
        from .controller_proxy import ControllerProxy  # lazy: guarded

        app.add_middleware(ControllerProxy, url=controller_url or "")
    return app


def _install_error_handlers(app: FastAPI) -> None:
    """Answer every failure with the error shape (DESIGN "Errors are sentences"): a
    platform error with its status, validation failures as 400 naming the field, unknown
    routes 404 and wrong methods 405 with ``Allow``, a database race 409, a busy store
    503 with ``Retry-After``, work stopped because its client left 499, and anything else
    500 with the exception's type only."""

    @app.exception_handler(AkkaError)
    async def _akka_error(_: Request, exc: AkkaError) -> JSONResponse:
        headers = None
        if isinstance(exc, Unavailable):
            headers = {"Retry-After": str(exc.retry_after)}
        return error_response(exc.status, exc.code, exc.message, exc.field, headers, exc.details)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
        field = _loc_to_field(tuple(first.get("loc", ())))
        msg = f"{field or 'request'}: {first.get('msg')}"
        if len(errs) > 1:
            msg += f" (and {len(errs) - 1} more)"
        return error_response(400, "invalid_request", msg, field or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(
                404, "not_found", f"No route {request.method} {request.url.path} on this service."
            )
        if exc.status_code == 405:
            allow = _allowed_methods(app, request)
            return error_response(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allow)}.",
                headers={"Allow": ", ".join(allow)},
            )
        return error_response(exc.status_code, "http_error", str(exc.detail), headers=exc.headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(_: Request, exc: ClientGone) -> JSONResponse:
        # nobody reads this: the client disconnected and the work stopped (connected.py)
        return error_response(499, "client_closed_request", "The client left before the answer.")

    @app.exception_handler(IntegrityError)
    async def _integrity(_: Request, exc: IntegrityError) -> JSONResponse:
        # Routes that create named things catch their own race; this is the backstop.
        log.warning("integrity error answered 409: %s", exc.orig)
        return error_response(
            409, "conflict", "The request conflicts with a concurrent change; retry it."
        )

    @app.exception_handler(OperationalError)
    async def _operational(_: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database error answered 503: %s", exc.orig)
        return error_response(
            503,
            "unavailable",
            "The state store is busy or unreachable; retry in a few seconds.",
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # The last guard: bad input is refused before it gets here (tests hold that).
        log.exception("unhandled error")
        return error_response(
            500, "internal", f"The service failed unexpectedly ({type(exc).__name__}); see its log."
        )


def _json_body_limit(settings: Settings) -> int:
    """``service.jsonBodyBytes`` of the deployment file (its default when the file is bad:
    the file's error is reported by the routes that read it)."""

    try:
        return load_deployment(settings.resolved_deployment_file()).service.jsonBodyBytes
    except Exception:
        return ServiceLimits().jsonBodyBytes


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods of the route the request's path matched (the ``Allow`` header).

    Each method is tried against the routes (included routers nest, so their ``methods``
    cannot simply be read off). A path can match several path templates
    (``/v1/registry/datasets/{namespace}/{name}`` and ``/v1/registry/{kinds}/…``,
    ``/v1/training/endpoints/info`` and ``/v1/training/endpoints/{endpoint_id}``), each its
    own path of the OpenAPI document. The path belongs to the most concrete of them (the
    OpenAPI rule: concrete paths match before templated ones; here a literal segment wins
    over a parameter, the first differing segment deciding), and only that path's
    documented methods are listed (issue 48). HEAD goes with GET. A path no documented
    template matches lists every method some route serves there.
    """
    from starlette.routing import Match, compile_path

    found = []
    for method in ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
            found.append(method)
    paths = app.openapi().get("paths", {})
    matching = [t for t in paths if compile_path(t)[0].match(request.url.path)]
    if not matching:
        return found
    template = min(matching, key=lambda t: [part.startswith("{") for part in t.split("/")])
    documented = {m.upper() for m in paths[template]}
    if "GET" in documented:
        documented.add("HEAD")
    return [m for m in found if m in documented]
