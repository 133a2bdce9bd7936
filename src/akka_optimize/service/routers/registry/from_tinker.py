"""``POST /v1/registry/models/{namespace}/{name}/from-tinker``: a Tinker checkpoint of the
namespace's project registered as the next version of a model (``registry models register
NS/NAME --from tinker://…``, :mod:`akka_optimize.tinker.registering`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ....core.access import rules as access
from ....core.uploads import safe_versions
from ....jobs.kinds import model_registered
from ....plan.schema.base import documented
from ....refs import NAME_PATTERN, validate_name
from ....registry.core import check_alias
from ....tinker.checkpoints_in import register_checkpoint
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import StoredVersion, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/registry", tags=["registry"])


CHECKPOINT_PATTERN = "^tinker://[^/]+/(sampler_weights|external_weights)/[^/]+$"
"""A checkpoint a version can be registered from (for the OpenAPI document)."""


class FromTinker(BaseModel):
    """The checkpoint to register."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(
        description="tinker://MODEL_ID/sampler_weights/NAME or …/external_weights/NAME, "
        "saved by a training client of this project (a training state, …/weights/NAME, is "
        "refused naming path).",
        max_length=400,
        json_schema_extra=documented(CHECKPOINT_PATTERN),
    )
    alias: str | None = Field(
        default=None,
        description="An alias to point at the version: a name that cannot read as a version "
        "(vN, latest).",
        json_schema_extra=documented(NAME_PATTERN),
    )


@router.post(
    "/models/{namespace}/{name}/from-tinker",
    **answers(
        StoredVersion,
        200,
        "The adapter was already stored: its existing version (created false).",
        also={201: (StoredVersion, "A new version (created true).")},
    ),
)
async def register_from_tinker(
    namespace: str, name: str, body: FromTinker, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Register a Tinker checkpoint of project ``namespace`` as ``namespace/name:vN``.

    Rules the schema cannot state, each refused with a 400 or 404 naming the field: ``path``
    is a checkpoint saved by a training client of this project, and ``alias`` a name that
    cannot read as a version (``vN``, ``latest``).

    Raises:
        Forbidden: the caller may not register models in ``namespace``.
        InvalidRequest: a bad name or alias, not a checkpoint path, or a training state
            (field ``path``).
        NotFound: no training client of the project saved that checkpoint (field ``path``).
    """
    access.check_namespace_write(principal, namespace, "models.register")
    name = validate_name(name, "name")
    if body.alias:
        check_alias(body.alias)
    ns = namespace.strip().lower()

    def work() -> tuple[Any, bool]:
        with ctx.db.session() as s:
            before = {v.digest for v in safe_versions(s, ns, name)}
            rv = register_checkpoint(s, ctx.store, ns, name, body.path, body.alias)
            created = rv.digest not in before
            if created:
                model_registered(ctx, s, ns, rv)
            return rv, created

    rv, created = await run_in_threadpool(work)
    return JSONResponse({**rv.to_dict(), "created": created}, status_code=201 if created else 200)
