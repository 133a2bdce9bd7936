"""Routes of the dashboard: login, the pages and the vendored static files.

Every page is a template that names what it shows (a project, a run prefix, a
registry entry, an endpoint) and leaves the data to ``dashboard.js``, which
fetches it from the JSON routes with the user's token. A page route only checks
that token (so a missing or wrong one shows the login form with the service's
sentence, status 401) and never reads the database itself.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from .. import __version__
from ..errors import AkkaError, NotFound

HERE = Path(__file__).parent
STATIC = HERE / "static"
COOKIE = "akka_optimize_token"
"""The cookie holding the user's bearer token (``Path=/ui; SameSite=Strict``)."""

TokenCheck = Callable[[Any, str], Any]
"""``check(ctx, "Bearer TOKEN")``: the principal the token names, or an
:class:`~akka_optimize.errors.AkkaError` with the sentence to show. The service gives its
own check (:func:`akka_optimize.core.auth.authenticate`) to :class:`Dashboard`: the
dashboard imports nothing of the service (README "Layout": ``service → ui``)."""

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


class Dashboard:
    """The dashboard's routes under ``/ui`` (:attr:`router`), checking tokens with ``check``."""

    def __init__(self, check: TokenCheck) -> None:
        self.check = check
        self.router = APIRouter(prefix="/ui", include_in_schema=False)
        self.router.add_api_route("/login", self.login_form, methods=["GET"])
        self.router.add_api_route("/login", self.login, methods=["POST"])
        self.router.add_api_route("/logout", self.logout, methods=["POST"])
        self.router.add_api_route("/", self.projects_page, methods=["GET"])
        self.router.add_api_route("/projects/{project}", self.project_page, methods=["GET"])
        self.router.add_api_route("/runs/{prefix}", self.run_page, methods=["GET"])
        self.router.add_api_route("/compare", self.compare_page, methods=["GET"])
        self.router.add_api_route("/registry", self.registry_page, methods=["GET"])
        self.router.add_api_route(
            "/registry/{kinds}/{namespace}/{name}", self.entry_page, methods=["GET"]
        )
        self.router.add_api_route("/endpoints", self.endpoints_page, methods=["GET"])
        self.router.add_api_route("/endpoints/{endpoint_id}", self.endpoint_page, methods=["GET"])
        self.router.add_api_route("/static/{path:path}", self.static, methods=["GET"])

    def _login_page(self, request: Request, message: str | None, status: int) -> HTMLResponse:
        nxt = request.url.path if request.url.path.startswith("/ui") else "/ui/"
        if request.url.query:
            nxt += "?" + request.url.query
        return render("login.html", status=status, message=message, next=nxt, title="Log in")

    def _checked(self, request: Request, template: str, **values: Any) -> HTMLResponse:
        """``template`` when the cookie holds a token this service accepts, else the login form."""
        token = request.cookies.get(COOKIE)
        if not token:
            return self._login_page(request, None, 401)
        try:
            principal = self.check(request.app.state.ctx, f"Bearer {token}")
        except AkkaError as exc:
            return self._login_page(request, exc.message, exc.status)
        return render(template, principal=principal, **values)

    def login_form(self, request: Request) -> HTMLResponse:
        """The login form (a ``#token=…`` fragment fills and submits it; see ``server start``)."""
        nxt = request.query_params.get("next", "/ui/")
        return render("login.html", message=None, next=nxt, title="Log in")

    def _safe_next(self, value: str) -> str:
        # Only a path of the dashboard itself: never an absolute URL (an open redirect).
        if value.startswith("/ui") and not value.startswith("//") and "\\" not in value:
            return value
        return "/ui/"

    async def login(self, request: Request) -> Response:
        """Check the posted token with the service's own check; store it in the cookie."""
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        nxt = self._safe_next((form.get("next") or ["/ui/"])[0])
        if not token:
            return render("login.html", 400, message="Paste a token.", next=nxt, title="Log in")
        try:
            # the token check reads the state store: in the thread pool, not on the event loop
            await run_in_threadpool(self.check, request.app.state.ctx, f"Bearer {token}")
        except AkkaError as exc:
            return render("login.html", exc.status, message=exc.message, next=nxt, title="Log in")
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(COOKIE, token, path="/ui", samesite="strict", httponly=False)
        return resp

    def logout(self) -> Response:
        """Forget the token (clears the cookie)."""
        resp = RedirectResponse("/ui/login", status_code=303)
        resp.delete_cookie(COOKIE, path="/ui")
        return resp

    def projects_page(self, request: Request) -> HTMLResponse:
        """Every project with its runs, models and endpoints."""
        return self._checked(request, "projects.html", title="Projects", project=None)

    def project_page(self, request: Request, project: str) -> HTMLResponse:
        """One project's runs, models and endpoints."""
        return self._checked(request, "projects.html", title=project, project=project)

    def run_page(self, request: Request, prefix: str) -> HTMLResponse:
        """One run by ID or unambiguous prefix (the JSON route says when it is neither)."""
        return self._checked(request, "run.html", title=f"run {prefix}", prefix=prefix)

    def compare_page(self, request: Request) -> HTMLResponse:
        """Two or more runs (``?runs=A,B``) overlaid on one chart."""
        runs = [r for r in request.query_params.get("runs", "").split(",") if r.strip()]
        return self._checked(request, "compare.html", title="Compare runs", runs=runs)

    def registry_page(self, request: Request) -> HTMLResponse:
        """Registered datasets and models."""
        return self._checked(request, "registry.html", title="Registry")

    def entry_page(self, request: Request, kinds: str, namespace: str, name: str) -> HTMLResponse:
        """A dataset (versions, aliases, preview) or model (versions, lineage, aliases)."""
        if kinds not in ("datasets", "models"):
            return render(
                "message.html", 404, title="Not found", message=f"No registry kind {kinds}."
            )
        return self._checked(
            request,
            "entry.html",
            title=f"{namespace}/{name}",
            kinds=kinds,
            ref=f"{namespace}/{name}",
        )

    def endpoints_page(self, request: Request) -> HTMLResponse:
        """Every endpoint: state and what it serves."""
        return self._checked(request, "endpoints.html", title="Endpoints", endpoint=None)

    def endpoint_page(self, request: Request, endpoint_id: str) -> HTMLResponse:
        """One endpoint with a chat box."""
        return self._checked(
            request, "endpoint.html", title=f"endpoint {endpoint_id}", endpoint=endpoint_id
        )

    def static(self, path: str) -> FileResponse:
        """A file of ``static/`` (the dashboard's script and style, vendored uPlot)."""
        target = (STATIC / path).resolve()
        if not target.is_relative_to(STATIC.resolve()) or not target.is_file():
            raise NotFound(f"No dashboard file {path}.")
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        return FileResponse(target, media_type=kind, headers={"Cache-Control": "max-age=3600"})
