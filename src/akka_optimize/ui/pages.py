"""Routes of the dashboard: login, the pages and the vendored static files.

Every page is a template that names what it shows (a project, a run prefix, a
registry entry, an endpoint) and leaves the data to ``dashboard.js``, which
fetches it from the JSON routes with the user's token. A page route only checks
that token (so a missing or wrong one shows the login form with the service's
sentence, status 401) and never reads the database itself.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from .. import __version__
from ..errors import AkkaError, NotFound
from ..service.auth import authenticate

HERE = Path(__file__).parent
STATIC = HERE / "static"
COOKIE = "akka_optimize_token"
"""The cookie holding the user's bearer token (``Path=/ui; SameSite=Strict``)."""

router = APIRouter(prefix="/ui", include_in_schema=False)
_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    """Render template ``name`` with ``values`` (plus the version) as an HTML response."""
    html = _env.get_template(name).render(version=__version__, **values)
    return HTMLResponse(html, status_code=status)


def _login_page(request: Request, message: str | None, status: int) -> HTMLResponse:
    nxt = request.url.path if request.url.path.startswith("/ui") else "/ui/"
    if request.url.query:
        nxt += "?" + request.url.query
    return render("login.html", status=status, message=message, next=nxt, title="Log in")


def _checked(request: Request, template: str, **values: Any) -> HTMLResponse:
    """``template`` when the cookie holds a token this service accepts, else the login form."""
    token = request.cookies.get(COOKIE)
    if not token:
        return _login_page(request, None, 401)
    try:
        principal = authenticate(request.app.state.ctx, f"Bearer {token}")
    except AkkaError as exc:
        return _login_page(request, exc.message, exc.status)
    return render(template, principal=principal, **values)


@router.get("/login")
def login_form(request: Request) -> HTMLResponse:
    """The login form (a ``#token=…`` fragment fills and submits it; see ``server start``)."""
    nxt = request.query_params.get("next", "/ui/")
    return render("login.html", message=None, next=nxt, title="Log in")


def _safe_next(value: str) -> str:
    # Only a path of the dashboard itself: never an absolute URL (an open redirect).
    if value.startswith("/ui") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/"


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the posted token with the service's own check; store it in the cookie."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    nxt = _safe_next((form.get("next") or ["/ui/"])[0])
    if not token:
        return render("login.html", 400, message="Paste a token.", next=nxt, title="Log in")
    try:
        # the token check reads the state store: in the thread pool, not on the event loop
        await run_in_threadpool(authenticate, request.app.state.ctx, f"Bearer {token}")
    except AkkaError as exc:
        return render("login.html", exc.status, message=exc.message, next=nxt, title="Log in")
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(COOKIE, token, path="/ui", samesite="strict", httponly=False)
    return resp


@router.post("/logout")
def logout() -> Response:
    """Forget the token (clears the cookie)."""
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/ui")
    return resp


@router.get("/")
def projects_page(request: Request) -> HTMLResponse:
    """Every project with its runs, models and endpoints."""
    return _checked(request, "projects.html", title="Projects", project=None)


@router.get("/projects/{project}")
def project_page(request: Request, project: str) -> HTMLResponse:
    """One project's runs, models and endpoints."""
    return _checked(request, "projects.html", title=project, project=project)


@router.get("/runs/{prefix}")
def run_page(request: Request, prefix: str) -> HTMLResponse:
    """One run by ID or unambiguous prefix (the JSON route says when it is neither)."""
    return _checked(request, "run.html", title=f"run {prefix}", prefix=prefix)


@router.get("/compare")
def compare_page(request: Request) -> HTMLResponse:
    """Two or more runs (``?runs=A,B``) overlaid on one chart."""
    runs = [r for r in request.query_params.get("runs", "").split(",") if r.strip()]
    return _checked(request, "compare.html", title="Compare runs", runs=runs)


@router.get("/registry")
def registry_page(request: Request) -> HTMLResponse:
    """Registered datasets and models."""
    return _checked(request, "registry.html", title="Registry")


@router.get("/registry/{kinds}/{namespace}/{name}")
def entry_page(request: Request, kinds: str, namespace: str, name: str) -> HTMLResponse:
    """A dataset (versions, aliases, preview) or model (versions, lineage, aliases)."""
    if kinds not in ("datasets", "models"):
        return render("message.html", 404, title="Not found", message=f"No registry kind {kinds}.")
    return _checked(
        request, "entry.html", title=f"{namespace}/{name}", kinds=kinds, ref=f"{namespace}/{name}"
    )


@router.get("/endpoints")
def endpoints_page(request: Request) -> HTMLResponse:
    """Every endpoint: state and what it serves."""
    return _checked(request, "endpoints.html", title="Endpoints", endpoint=None)


@router.get("/endpoints/{endpoint_id}")
def endpoint_page(request: Request, endpoint_id: str) -> HTMLResponse:
    """One endpoint with a chat box."""
    return _checked(request, "endpoint.html", title=f"endpoint {endpoint_id}", endpoint=endpoint_id)


@router.get("/static/{path:path}")
def static(path: str) -> FileResponse:
    """A file of ``static/`` (the dashboard's script and style, vendored uPlot)."""
    target = (STATIC / path).resolve()
    if not target.is_relative_to(STATIC.resolve()) or not target.is_file():
        raise NotFound(f"No dashboard file {path}.")
    kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return FileResponse(target, media_type=kind, headers={"Cache-Control": "max-age=3600"})
