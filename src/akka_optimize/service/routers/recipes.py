"""Routes of minifield recipe runs under ``/v1/training/recipes`` (issue 26 item 2).

``POST /v1/training/recipes`` submits a recipe to a project (a run of kind ``recipe``, then
read with the runs routes); ``POST /v1/training/recipes/claim`` is the long poll of
``minifield-worker supervise``. See :mod:`akka_optimize.core.recipes.runs`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...core.recipes import runs as recipe_runs
from ..deps import CtxDep, PrincipalDep
from ..routing import JsonRoute
from ..schemas import RecipeClaimAnswer, RunView, answers
from .runs import read_json_body

router = APIRouter(route_class=JsonRoute, prefix="/v1/training")


@router.post("/recipes", status_code=201, **answers(RunView, 201, "The recipe run, queued."))
async def submit_recipe(request: Request, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    """Queue a recipe run: ``{"project", "recipe"}``. The recipe is checked as
    ``minifield-worker run`` checks it (a refusal is 400 naming the recipe's field) and its
    computation identity computed; a ``minifield-worker supervise`` claims it."""
    body = await read_json_body(request)
    view = await run_in_threadpool(recipe_runs.submit_recipe, ctx, principal, body)
    return JSONResponse(view, status_code=201)


@router.post("/recipes/claim", **answers(RecipeClaimAnswer, 200, "The claimed run, or none."))
async def claim_recipe(request: Request, ctx: CtxDep, principal: PrincipalDep) -> Any:
    """Claim the oldest queued recipe run whose computation the worker advertises
    (``{"accepts": [{schema_version, implementation, computation}], "wait", "worker"}``),
    waiting up to ``wait`` seconds; ``{"job": null}`` when none came."""
    body = await read_json_body(request)
    job = await run_in_threadpool(recipe_runs.claim_recipe, ctx, principal, body)
    return JSONResponse({"job": job})
