"""Routes of the base_models resource under ``/v1/training/base-models``.

- ``GET /v1/training/base-models[?all=true]``: selected base models, or every catalog
  entry (seeds/000 "base-models list shows what is selected and usable, and --all shows
  everything the deployment allows"); ``{"baseModels": [...]}``.
- ``POST /v1/training/base-models`` ``{"repository": "Owner/Repo"}``: select; answers at
  once with the selection (``PENDING``, ``FETCHING`` or ``READY``) while the weights
  arrive in the background. 404 when the catalog does not allow the repository.
- ``GET /v1/training/base-models/candidates?author=A&match=GLOB``: the hub listing with
  the catalog's verdicts (502 when the hub is unreachable).
- ``GET /v1/training/base-models/{ref}``: one base model by repository, registry
  reference (``owner/repo:v1``) or selection-ID prefix.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field

from ...catalog.hub import candidates, list_hub_models
from ...catalog.selection.machine import (
    SelectionManager,
    entry_view,
    find_entry,
    get_selection,
    list_base_models,
    select_base_model,
    settings_catalog,
)
from ...core.context import ServiceContext
from ...plan.schema.base import RequestModel
from ..deps import CtxDep
from ..routing import JsonRoute
from ..schemas import BaseModelList, BaseModelView, CandidateList, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/base-models", tags=["base-models"])


class SelectRequest(RequestModel):
    """Body of ``POST /v1/training/base-models``."""

    repository: str = Field(min_length=1, description="Hub repository in the catalog.")


def manager(ctx: ServiceContext) -> SelectionManager:
    """The service's :class:`SelectionManager` (created at start-up)."""
    if ctx.base_models is None:
        ctx.base_models = SelectionManager(ctx.db, ctx.settings)
    return ctx.base_models


def on_startup(ctx: ServiceContext) -> None:
    """Check the catalog parses, and restart fetches a previous process left unfinished."""
    settings_catalog(ctx.settings)
    manager(ctx).recover()


def on_shutdown(ctx: ServiceContext) -> None:
    """End running fetch subprocesses."""
    if ctx.base_models is not None:
        ctx.base_models.stop()


@router.get("", **answers(BaseModelList))
def list_models(ctx: CtxDep, all_: bool = Query(False, alias="all")) -> dict[str, Any]:
    """Selected base models; with ``all=true`` every entry of the catalog."""
    catalog = settings_catalog(ctx.settings)
    with ctx.db.session() as s:
        return {
            "baseModels": list_base_models(s, catalog, all_entries=all_),
            "catalog": catalog.source,
        }


@router.post(
    "",
    **answers(
        BaseModelView,
        200,
        "The entry was already selected: its state.",
        also={201: (BaseModelView, "The entry, newly selected: its download has started.")},
    ),
)
def select_model(body: SelectRequest, ctx: CtxDep) -> JSONResponse:
    """Select a catalog entry: 201 when newly selected, 200 when it already was."""
    catalog = settings_catalog(ctx.settings)
    with ctx.db.session() as s:
        existed = get_selection(s, body.repository) is not None
        row = select_base_model(s, catalog, body.repository)
        row_id = row.id
    manager(ctx).start(row_id)
    with ctx.db.session() as s:
        entry = catalog.require(body.repository)
        view = entry_view(entry, get_selection(s, entry.key), catalog)
    return JSONResponse(view, status_code=200 if existed else 201)


@router.get("/candidates", **answers(CandidateList))
def list_candidates(
    ctx: CtxDep,
    author: str = Query(min_length=1),
    match: str = Query("*"),
) -> dict[str, Any]:
    """The hub repositories of ``author`` matching ``match`` and the catalog's verdicts."""
    catalog = settings_catalog(ctx.settings)
    dep = ctx.deployment()
    models = list_hub_models(author)
    return candidates(models, author, match, catalog, dep.deviceProfiles)


@router.get("/{ref:path}", **answers(BaseModelView))
def get_model(ref: str, ctx: CtxDep) -> dict[str, Any]:
    """One base model by repository, registry reference or selection-ID prefix."""
    catalog = settings_catalog(ctx.settings)
    with ctx.db.session() as s:
        entry = find_entry(s, catalog, ref)
        return entry_view(entry, get_selection(s, entry.key), catalog)
