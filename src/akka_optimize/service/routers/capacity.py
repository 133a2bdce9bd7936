"""``GET /v1/training/capacity``: pools, quotas, and what holds or waits for devices
(issue 22; seeds/000 "Capacity and waiting", seeds/001 "Capacity")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ...core.access import rules as access
from ...jobs.capacity import usage as capacity
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import CapacityReport, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training")


@router.get("/capacity", **answers(CapacityReport))
def get_capacity(
    s: SessionDep, ctx: CtxDep, principal: PrincipalDep, project: str | None = None
) -> dict[str, Any]:
    """Each pool's declared and observed devices and use, and per project (``projectId``,
    ``projectName``) its usage against its quota, what it holds and what waits, with each
    waiting item's position and reason. ``?project=`` narrows the projects to one; a
    project token sees its own project only (the pools' totals stay whole)."""
    name = access.find_project(s, project, principal).name if project else access.scope(principal)
    dep = ctx.deployment()
    return capacity.report(s, dep, name)
