"""The Tinker SDK's RestClient routes for training runs and checkpoints (session-less):
``GET /api/v1/training_runs``, ``GET /api/v1/training_runs/{id}``, ``GET
/api/v1/training_runs/{id}/checkpoints``, ``GET /api/v1/checkpoints``, ``DELETE
/api/v1/training_runs/{id}/checkpoints/{KIND}/{NAME}`` and ``PUT …/{NAME}/ttl``, ``GET
…/external_weights/{NAME}/external_weights_urls`` and the signed file URLs it answers
(``GET /api/v1/external_weights/…``, :mod:`akka_optimize.tinker.exports`); publishing
is refused with a sentence. The mapping onto runs and registered versions is
:mod:`akka_optimize.tinker.rest`. A project key sees its project's runs only; an admin key
sees every project's, or ``project_id``'s. Refusals are 400/403/404 (never 409, which the
SDK retries for minutes).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ....core.auth import Principal
from ....errors import Forbidden, InvalidRequest, NotFound
from ....tinker import exports, rest
from ....tinker.kind import saved_key
from ...deps import CtxDep
from ...routing import JsonRoute
from .protocol import Caller, JsonBody

router = APIRouter(route_class=JsonRoute, prefix="/api/v1")


def _scope(p: Principal, project_id: str | None) -> str | None:
    """The project a listing covers: the key's own; an admin key's ``project_id`` or all."""
    if p.project and project_id and project_id.strip().lower() != p.project:
        raise Forbidden(
            f"project_id {project_id!r}: this key acts only in project {p.project!r}.",
            field="project_id",
        )
    return p.project or (project_id.strip().lower() if project_id else None)


@router.get("/training_runs")
def list_training_runs(
    ctx: CtxDep,
    p: Caller,
    limit: int = 20,
    offset: int = 0,
    access_scope: str = "owned",
    project_id: str | None = None,
) -> dict[str, Any]:
    """``RestClient.list_training_runs``: newest first, ``limit`` (1–1000) from ``offset``.

    Raises:
        InvalidRequest: ``limit`` or ``offset`` out of range. Forbidden: another project.
    """
    limit, offset = rest.page(limit, offset)
    if access_scope not in ("owned", "accessible"):
        raise InvalidRequest(
            f"access_scope is {access_scope!r}; give owned or accessible.", field="access_scope"
        )
    scope = _scope(p, project_id)
    with ctx.db.session() as s:
        rest.sweep_expired(s, ctx.store, scope)
        return rest.list_training_runs(s, scope, limit, offset)


@router.get("/training_runs/{training_run_id}")
def get_training_run(
    ctx: CtxDep, p: Caller, training_run_id: str, access_scope: str = "owned"
) -> dict[str, Any]:
    """``RestClient.get_training_run[_by_tinker_path]``: the SDK's ``TrainingRun``.

    Raises:
        NotFound: no such training run for this key (field ``training_run_id``).
    """
    with ctx.db.session() as s:
        return rest.training_run(rest.find_run(s, p.project, training_run_id))


@router.get("/training_runs/{training_run_id}/checkpoints")
def list_checkpoints(ctx: CtxDep, p: Caller, training_run_id: str) -> dict[str, Any]:
    """``RestClient.list_checkpoints``: every checkpoint of the run, oldest first.

    Raises:
        NotFound: no such training run for this key (field ``training_run_id``).
    """
    with ctx.db.session() as s:
        rest.sweep_expired(s, ctx.store, p.project)
        return {"checkpoints": rest.checkpoints(rest.find_run(s, p.project, training_run_id))}


@router.get("/checkpoints")
def list_user_checkpoints(
    ctx: CtxDep, p: Caller, limit: int = 100, offset: int = 0
) -> dict[str, Any]:
    """``RestClient.list_user_checkpoints``: the key's project's checkpoints (an admin
    key: every project's), newest first.

    Raises:
        InvalidRequest: ``limit`` or ``offset`` out of range.
    """
    limit, offset = rest.page(limit, offset)
    with ctx.db.session() as s:
        rest.sweep_expired(s, ctx.store, p.project)
        return rest.list_user_checkpoints(s, p.project, limit, offset)


@router.delete("/training_runs/{training_run_id}/checkpoints/{kind}/{name}")
def delete_checkpoint(
    ctx: CtxDep, p: Caller, training_run_id: str, kind: str, name: str
) -> Response:
    """``RestClient.delete_checkpoint[_from_tinker_path]``: the path stops resolving and its
    blobs go; a sampler checkpoint's registered model version stays.

    Raises:
        InvalidRequest: a checkpoint kind other than weights / sampler_weights.
        NotFound: no such run or checkpoint for this key (the field named).
    """
    cid = rest.checkpoint_id(kind, name)
    with ctx.db.session() as s:
        rest.delete_checkpoint(s, ctx.store, p.project, training_run_id, cid)
    return Response(status_code=204)


@router.put("/training_runs/{training_run_id}/checkpoints/{kind}/{name}/ttl")
def set_ttl(
    ctx: CtxDep, p: Caller, training_run_id: str, kind: str, name: str, body: JsonBody
) -> Response:
    """``RestClient.set_checkpoint_ttl_from_tinker_path``: the checkpoint expires
    ``ttl_seconds`` (3600 to 315576000) from now, or never with null.

    Raises:
        InvalidRequest: ``ttl_seconds`` out of range. NotFound: no such run or checkpoint.
    """
    cid = rest.checkpoint_id(kind, name)
    with ctx.db.session() as s:
        rest.set_ttl(s, p.project, training_run_id, cid, body.get("ttl_seconds"))
    return Response(status_code=204)


@router.post("/training_runs/{training_run_id}/checkpoints/{kind}/{name}/publish")
@router.delete("/training_runs/{training_run_id}/checkpoints/{kind}/{name}/publish")
def publish(p: Caller, training_run_id: str, kind: str, name: str) -> None:
    """``publish/unpublish_checkpoint_from_tinker_path``: refused, always.

    Raises:
        InvalidRequest: (field ``checkpoint_id``) checkpoints are never public here.
    """
    raise InvalidRequest(
        f"checkpoint_id {kind}/{name}: the platform does not publish checkpoints; a "
        "checkpoint is visible to its project only. Share a sampler checkpoint through its "
        "registered model version (PROJECT/NAME:vN: `registry models object`, or served by "
        "`training endpoints create`) instead.",
        field="checkpoint_id",
    )


@router.get("/training_runs/{training_run_id}/checkpoints/{kind}/{name}/external_weights_urls")
def external_weights_urls(
    ctx: CtxDep, p: Caller, request: Request, training_run_id: str, kind: str, name: str
) -> dict[str, Any]:
    """``RestClient.get_external_weights_urls``: one signed URL per file of a
    ``save_weights_external`` checkpoint (a PEFT folder), valid an hour.

    Raises:
        InvalidRequest: not an external_weights checkpoint (field ``checkpoint_id``).
        NotFound: no such run or checkpoint for this key (the field named).
    """
    if kind != "external_weights":
        raise InvalidRequest(
            f"checkpoint_id {kind}/{name}: only external_weights/NAME checkpoints have "
            "download URLs (save_weights_external makes one; `tinker checkpoint download` "
            "does it for a weights/NAME state).",
            field="checkpoint_id",
        )
    cid = rest.checkpoint_id(kind, name)
    with ctx.db.session() as s:
        key = saved_key(rest.live_checkpoint(s, p.project, training_run_id, cid), cid)
    files = sorted(k[len(f"{key}/") :] for k in ctx.store.list(f"{key}/"))
    base = str(request.base_url).rstrip("/")
    return exports.signed_urls(base, ctx.dev_secret, training_run_id, cid, files)


@router.get("/external_weights/{training_run_id}/external_weights/{name}/{path:path}")
def external_weights_file(
    ctx: CtxDep, training_run_id: str, name: str, path: str, expires: int = 0, signature: str = ""
) -> Response:
    """One file of an external weights checkpoint, for a URL ``external_weights_urls``
    signed (no key: the signature is the permission, for that file until ``expires``).

    Raises:
        Forbidden: a signature that does not match, or an expired URL (field ``signature``).
        NotFound: the checkpoint was deleted or expired, or has no such file.
    """
    cid = f"external_weights/{name}"
    exports.check(ctx.dev_secret, training_run_id, cid, path, expires, signature)
    with ctx.db.session() as s:
        key = saved_key(rest.live_checkpoint(s, None, training_run_id, cid), cid)
    blob = f"{key}/{path}"
    if not ctx.store.exists(blob):
        raise NotFound(f"{path}: checkpoint {cid} has no such file.", field="path")
    return Response(ctx.store.get_bytes(blob), media_type="application/octet-stream")
