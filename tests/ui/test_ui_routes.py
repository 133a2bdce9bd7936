"""The dashboard's routes without a browser: login, the cookie, static files, packaging."""

from __future__ import annotations

import tomllib

import httpx

from akka_optimize.devtoken import dev_secret_path, mint_dev_token
from akka_optimize.ui.pages import COOKIE, HERE
from helpers import REPO, LiveService


def test_pages_show_the_login_form_until_a_known_token_is_given(service: LiveService) -> None:
    bare = httpx.get(f"{service.url}/ui/runs/abc")
    assert bare.status_code == 401
    assert 'name="token"' in bare.text and 'value="/ui/runs/abc"' in bare.text
    wrong = httpx.get(f"{service.url}/ui/", cookies={COOKIE: "ak_wrong"})
    assert wrong.status_code == 401
    assert "The bearer token is not known to this service." in wrong.text
    bad_dev = httpx.get(f"{service.url}/ui/", cookies={COOKIE: "dev_0000"})
    assert "The development token does not match this server&#39;s home." in bad_dev.text
    dev = mint_dev_token(dev_secret_path(service.home).read_text().strip().encode())
    for token in (dev, service.token):
        ok = httpx.get(f"{service.url}/ui/registry", cookies={COOKIE: token})
        assert ok.status_code == 200 and 'id="datasets"' in ok.text
    assert "Traceback" not in bare.text + wrong.text


def test_login_sets_the_cookie_and_redirects_only_inside_the_dashboard(
    service: LiveService,
) -> None:
    url = f"{service.url}/ui/login"
    refused = httpx.post(url, data={"token": "ak_nope", "next": "/ui/registry"})
    assert refused.status_code == 401 and "not known to this service" in refused.text
    assert COOKIE not in refused.cookies
    empty = httpx.post(url, data={"token": " "})
    assert empty.status_code == 400 and "Paste a token." in empty.text
    ok = httpx.post(url, data={"token": service.token, "next": "/ui/registry"})
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/registry"
    cookie = ok.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={service.token};")
    assert "Path=/ui" in cookie and "SameSite=strict" in cookie and "HttpOnly" not in cookie
    for elsewhere in ("https://example.com/", "//example.com/ui", "/v1/training/runs"):
        r = httpx.post(url, data={"token": service.token, "next": elsewhere})
        assert r.headers["location"] == "/ui/", elsewhere
    out = httpx.post(f"{service.url}/ui/logout")
    assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]


def test_static_files_are_served_and_nothing_outside_them(service: LiveService) -> None:
    js = httpx.get(f"{service.url}/ui/static/vendor/uplot/uPlot.iife.min.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert js.content == (HERE / "static/vendor/uplot/uPlot.iife.min.js").read_bytes()
    for path in ("%2e%2e/pages.py", "..%2fpages.py", "nothing.js"):
        r = httpx.get(f"{service.url}/ui/static/{path}")
        assert r.status_code == 404, path
        assert r.json()["error"]["code"] == "not_found"


def test_every_dashboard_file_is_package_data_and_uplot_ships_its_licence() -> None:
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["akka_optimize"]
    files = [
        p
        for p in HERE.rglob("*")
        if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    ]
    assert len(files) >= 12
    shipped = {p for g in globs for p in HERE.parent.glob(g)}  # as setuptools globs them
    assert set(files) <= shipped, sorted(str(f) for f in set(files) - shipped)
    vendor = HERE / "static/vendor/uplot"
    assert "The MIT License" in (vendor / "LICENSE").read_text()
    assert "Version: 1.6.32" in (vendor / "README.md").read_text()
