"""The operator's view (issue 54 item 7): ``GET /metrics`` for Prometheus and
``GET /v1/training/runs/{run_id}/grafana``, the link to a run's panel of the dashboard
shipped as ``deploy/grafana/akka-optimize.json`` (F142 ``training runs grafana``).

``/metrics`` is guarded like the rest of the API, on the same address: its series cover
every project, so it needs an admin token (a project token is refused, action
``metrics.read``); Prometheus sends the token as a bearer credential.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query
from fastapi.responses import Response
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import Field

from ...core.access import rules as access
from ...core.access.scope import refusal
from ...errors import InvalidRequest
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..metrics import exposition
from ..metrics_store import store_registry
from ..routing import JsonRoute
from ..schemas import View, answers, binary

router = APIRouter(route_class=JsonRoute)

PLATFORM_PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@router.get("/metrics", **binary("Prometheus text format 0.0.4.", "text/plain"))
def metrics(s: SessionDep, ctx: CtxDep, principal: PrincipalDep) -> Response:
    """The service's request latency and endpoint counters (this process's, or with
    ``--workers N`` every process's summed: :mod:`akka_optimize.service.metrics`), and the
    state store's runs, pools, queues, claims, endpoints and per-run training series
    (README "The operator's view"). Needs an admin token: the series name every
    project's runs."""
    if access.scope(principal) is not None:
        raise refusal(
            "metrics.read",
            "The metrics name every project's runs and endpoints, so reading them needs an "
            "admin token; this token acts in one project",
        )
    dep = ctx.deployment()
    return Response(exposition(store_registry(s, dep)), media_type=CONTENT_TYPE_PLAIN_0_0_4)


class GrafanaLink(View):
    """Where a run's panel is in the deployment's Grafana."""

    url: str = Field(description="The link to the run's panel (Grafana's viewPanel).")
    runId: str = Field(description="The run's full ID.")
    projectName: str = Field(description="The run's training project.")
    platformProject: str = Field(description="The platform project the link selects.")
    dashboardUid: str = Field(description="The dashboard's uid (grafana.dashboardUid).")
    panelId: int = Field(description="The run panel's id (grafana.runPanelId).")


@router.get("/v1/training/runs/{run_id}/grafana", **answers(GrafanaLink))
def run_grafana(
    run_id: str,
    s: SessionDep,
    ctx: CtxDep,
    principal: PrincipalDep,
    platform_project: str = Query(
        alias="platformProject",
        description="The platform project whose Prometheus labels (platform_project) the "
        "dashboard selects.",
    ),
) -> dict[str, Any]:
    """The link to run ``run_id``'s panel in the deployment's Grafana (``grafana.url``).

    Raises:
        InvalidRequest: (``grafana_not_configured``) the deployment names no Grafana;
            (field ``platformProject``) a platform project that is not a name.
        NotFound: no run the caller sees.
    """
    run = access.find_run(principal, s, run_id)
    if not PLATFORM_PROJECT.match(platform_project):
        raise InvalidRequest(
            f"--platform-project {platform_project!r} is not a platform project name "
            "(letters, digits, '.', '_' and '-', at most 128).",
            field="platformProject",
        )
    dep = ctx.deployment()
    g = dep.grafana
    if not g.url:
        raise InvalidRequest(
            "This deployment names no Grafana, so there is no panel to link to: set "
            f"grafana.url in the deployment file ({dep.source or 'the shipped default'}) and "
            "import deploy/grafana/akka-optimize.json there.",
            field="grafana.url",
            code="grafana_not_configured",
        )
    query = urlencode(
        {
            "orgId": 1,
            "var-platform_project": platform_project,
            "var-project": run.project,
            "var-run": run.id,
            "viewPanel": g.runPanelId,
        }
    )
    url = f"{g.url.rstrip('/')}/d/{quote(g.dashboardUid)}/akka-optimize?{query}"
    return {
        "url": url,
        "runId": run.id,
        "projectName": run.project,
        "platformProject": platform_project,
        "dashboardUid": g.dashboardUid,
        "panelId": g.runPanelId,
    }
