"""``/openapi.json``, ``/docs`` and ``/redoc``, behind the bearer token like every route
but ``/healthz`` (issue 14 item 9).

The two documentation pages embed the OpenAPI document itself rather than fetch
``/openapi.json`` from the browser (which would carry no token), so a page fetched with a
token (``curl -H "Authorization: Bearer …" …/docs > docs.html``) is complete on its own.
The pages load Swagger UI and ReDoc from the jsDelivr CDN, as FastAPI's own pages do.
"""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ..routing import JsonRoute

router = APIRouter(route_class=JsonRoute, include_in_schema=False)

_SWAGGER = """<!DOCTYPE html>
<html><head><title>{title} - Swagger UI</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head><body><div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({{spec: {spec}, dom_id: "#swagger-ui"}});</script>
</body></html>"""

_REDOC = """<!DOCTYPE html>
<html><head><title>{title} - ReDoc</title></head><body><div id="redoc"></div>
<script src="https://cdn.jsdelivr.net/npm/redoc@2/bundles/redoc.standalone.js"></script>
<script>Redoc.init({spec}, {{}}, document.getElementById("redoc"));</script>
</body></html>"""


def _spec(request: Request) -> dict[str, Any]:
    return request.app.openapi()


def _embedded(request: Request, page: str) -> HTMLResponse:
    # "</" is escaped so no string in the document can close the <script> element.
    spec = json.dumps(_spec(request)).replace("</", "<\\/")
    title = html.escape(request.app.title)
    return HTMLResponse(page.format(title=title, spec=spec))


@router.get("/openapi.json")
def openapi_document(request: Request) -> JSONResponse:
    """The service's OpenAPI document."""
    return JSONResponse(_spec(request))


@router.get("/docs")
def swagger_page(request: Request) -> HTMLResponse:
    """Swagger UI over the embedded OpenAPI document."""
    return _embedded(request, _SWAGGER)


@router.get("/redoc")
def redoc_page(request: Request) -> HTMLResponse:
    """ReDoc over the embedded OpenAPI document."""
    return _embedded(request, _REDOC)
