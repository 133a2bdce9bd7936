"""``GET /healthz`` (no token) and ``GET /v1/training/info``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ... import __version__
from ...core.access.scope import scope
from ..deps import PrincipalDep, RawCtxDep
from ..routing import JsonRoute
from ..schemas import Health, TrainingInfo

public_router = APIRouter(route_class=JsonRoute)
router = APIRouter(route_class=JsonRoute)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


@public_router.get("/healthz", response_model=Health)
async def healthz() -> dict[str, str]:
    """Liveness: answers as soon as the process serves HTTP (on the event loop, so it
    never waits for a request thread)."""
    return {"status": "ok"}


@router.get("/v1/training/info", response_model=TrainingInfo)
def training_info(ctx: RawCtxDep, principal: PrincipalDep) -> dict[str, Any]:
    """Build version, state store, blob store and whether start-up completed. The stores'
    URLs and the home folder are the service's own: an admin token sees them, a project
    token gets null (issue 48 item 4)."""
    db_url = ctx.settings.database_url or ""
    admin = scope(principal) is None
    return {
        "version": __version__,
        "stateStore": {
            "kind": db_url.split(":", 1)[0].split("+")[0],
            "url": _redact(db_url) if admin else None,
        },
        "blobStore": {"url": _redact(ctx.settings.blobs_url or "") if admin else None},
        "home": str(ctx.settings.home) if admin else None,
        "startedCompletely": ctx.started.is_set(),
        "startupError": ctx.startup_error,
    }
