"""``/v1/registry/adapter-imports``: ``training adapters import`` with an ID and
``training adapters get IMPORT_ID`` (F118; :mod:`akka_optimize.core.adapter_imports`
does the work and says what is refused when)."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...core.access import rules as access
from ...core.adapter_imports import (
    check_before,
    fail_orphans,
    find_import,
    record_import,
    run_import,
    view,
)
from ...core.context import ServiceContext
from ...core.uploads import registry_limits
from ...refs import validate_name
from ...registry.core import check_alias
from ..deps import CtxDep, PrincipalDep
from ..routing import JsonRoute
from ..schemas import AdapterImportView, answers
from .registry.transfer import spool_body

router = APIRouter(route_class=JsonRoute, prefix="/v1/registry/adapter-imports", tags=["registry"])


def on_startup(ctx: ServiceContext) -> None:
    """Fail the imports a process of this host left ``CHECKING`` when it died."""
    fail_orphans(ctx)


@router.post(
    "/{namespace}/{name}",
    status_code=202,
    **answers(AdapterImportView, 202, "The import, CHECKING."),
)
async def start_import(
    namespace: str,
    name: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    base_model: str = Query(alias="baseModel", description="The base model it was trained on."),
    alias: str | None = Query(None, description="An alias to point at the version."),
) -> JSONResponse:
    """Receive a PEFT adapter folder (a tar of it) and start its import: answered at once
    with the import's ID in ``CHECKING``; ``GET …/adapter-imports/{id}`` shows its stages
    and outcome. Refused before anything is recorded: another namespace (403), a bad name
    or alias, a base model that is not selected and cached (400)."""
    ns, nm = validate_name(namespace, "namespace"), validate_name(name, "name")
    access.check_namespace_write(principal, ns, "models.register")
    if alias:
        check_alias(alias)

    def before() -> None:
        with ctx.db.session() as s:
            check_before(ctx, s, base_model)

    await run_in_threadpool(before)
    limits = registry_limits(ctx)
    path = await spool_body(
        request, ctx, limits.bundleCompressedBytes, "model archive", "bundleCompressedBytes"
    )

    try:
        answer = await run_in_threadpool(record_import, ctx, ns, nm, base_model, alias)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    threading.Thread(
        target=run_import, args=(ctx, answer["id"], path), name="adapter-import", daemon=True
    ).start()
    return JSONResponse(answer, status_code=202)


@router.get("/{import_id}", **answers(AdapterImportView))
def get_import(import_id: str, ctx: CtxDep, principal: PrincipalDep) -> dict[str, Any]:
    """An import's stages done, the stage under way, and its outcome: the registered
    version, or why it was refused (nothing registered). A project token sees imports
    into its own namespace."""
    with ctx.db.session() as s:
        return view(find_import(s, principal, import_id))
