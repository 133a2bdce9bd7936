"""HTTP client of the service: addresses, tokens, the error shape, one retry on 503.

Addresses (seeds/001 "Other changes"): ``TRAINER_URL`` / ``REGISTRY_URL`` take
precedence for their own service, then ``AKKA_OPTIMIZE_URL``, then
``http://localhost:9001``.

Tokens, first found wins: ``AKKA_OPTIMIZE_TOKEN``; for a trainer at
``http://localhost:9001`` (or ``127.0.0.1:9001``) a development token minted from the
server home's secret, without reading a saved login (seeds/000 "Smaller changes"); a
token saved by ``login`` for that address (also for the local trainer when this shell's
``AKKA_OPTIMIZE_HOME`` holds no secret).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..devtoken import dev_secret_path, mint_dev_token
from ..settings import default_home
from .context import CliError, prog

DEFAULT_URL = "http://localhost:9001"
SERVICE_ENV = {"trainer": "TRAINER_URL", "registry": "REGISTRY_URL"}


def service_url(service: str = "trainer") -> str:
    """The base URL of ``service`` (``trainer`` or ``registry``)."""
    own = os.environ.get(SERVICE_ENV.get(service, ""), "")
    return (own or os.environ.get("AKKA_OPTIMIZE_URL") or DEFAULT_URL).rstrip("/")


def credentials_path() -> Path:
    """Where ``login`` saves tokens: ``$AKKA_OPTIMIZE_CONFIG`` or ``~/.config/akka-optimize``."""
    base = os.environ.get("AKKA_OPTIMIZE_CONFIG")
    root = Path(base) if base else Path.home() / ".config" / "akka-optimize"
    return root / "credentials.json"


def _norm(url: str) -> str:
    return url.rstrip("/").lower()


def save_login(url: str, token: str) -> Path:
    """Save ``token`` for ``url`` (file mode 0600). Returns the file written."""
    p = credentials_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(p.read_text()) if p.exists() else {}
    data[_norm(url)] = token
    tmp = p.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, p)
    return p


def is_local_dev_trainer(url: str) -> bool:
    """Whether ``url`` is the local development trainer ``http://localhost:9001``."""
    u = urlsplit(url)
    return u.scheme == "http" and u.hostname in ("localhost", "127.0.0.1") and u.port == 9001


def resolve_token(url: str) -> str | None:
    """The bearer token the CLI sends to ``url``, or ``None`` (see module docstring)."""
    env = os.environ.get("AKKA_OPTIMIZE_TOKEN")
    if env:
        return env
    if is_local_dev_trainer(url):
        secret = dev_secret_path(default_home())
        if secret.exists():
            return mint_dev_token(secret.read_text().strip().encode())
    p = credentials_path()
    if p.exists():
        return json.loads(p.read_text()).get(_norm(url))
    return None


def wait_after_503(r: httpx.Response) -> None:
    """Sleep for the answer's ``Retry-After`` seconds (2 when absent, at most 10) before
    the one retry every command makes after a 503 (F136: an access-check outage answers
    503 "retry after a few seconds")."""
    try:
        wait = float(r.headers.get("Retry-After", "2") or 2)
    except ValueError:
        wait = 2.0
    time.sleep(min(max(wait, 0.0), 10.0))


def retrying_503(send: Callable[[], httpx.Response]) -> httpx.Response:
    """``send()``, and once more after :func:`wait_after_503` when it answered 503: the
    retry of :meth:`Client.request` for commands that send with httpx themselves
    (``runs start``, streamed uploads, downloads)."""
    r = send()
    if r.status_code == 503:
        wait_after_503(r)
        r = send()
    return r


class Client:
    """A thin JSON client of one service. Raises :class:`CliError` with the service's message."""

    def __init__(self, service: str = "trainer", timeout: float = 60.0) -> None:
        self.url = service_url(service)
        self.token = resolve_token(self.url)
        self.timeout = timeout

    def headers(self) -> dict[str, str]:
        """Authorization header for this service (empty without a token)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, method: str, path: str, *, retry_503: bool = True, **kw: Any) -> Any:
        """Send a request; return the decoded JSON body (or raw bytes for non-JSON)."""
        kw.setdefault("timeout", self.timeout)
        headers = {**self.headers(), **kw.pop("headers", {})}
        try:
            r = httpx.request(method, self.url + path, headers=headers, **kw)
        except httpx.ConnectError as exc:
            raise CliError(
                f"Cannot reach the service at {self.url}. Start it with "
                f"`{prog()} server start`, or set AKKA_OPTIMIZE_URL."
            ) from exc
        except httpx.TimeoutException as exc:
            raise CliError(f"The service at {self.url} did not answer in time ({exc}).") from exc
        if r.status_code == 401 and not self.token:
            ways = (
                f"log in with `{prog()} login --token TOKEN --url {self.url}` or set "
                f"AKKA_OPTIMIZE_TOKEN; `{prog()} server token create` (on the server's "
                "machine) prints a token."
            )
            if is_local_dev_trainer(self.url):
                ways = (
                    f"No development secret is at {dev_secret_path(default_home())}: set "
                    f"AKKA_OPTIMIZE_HOME to the server's home folder, or {ways}"
                )
            else:
                ways = ways[0].upper() + ways[1:]
            raise CliError(
                f"The service at {self.url} needs a token and this shell has no token. {ways}"
            )
        if r.status_code == 503 and retry_503:
            wait_after_503(r)
            return self.request(method, path, retry_503=False, headers=headers, **kw)
        return decode(r)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> Any:
        return self.request("PUT", path, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)


def with_prog(message: str) -> str:
    """Name commands in a service message as the user runs them: the service writes
    `` `training …` ``; the CLI shows `` `akka-optimize training …` `` (or ``akka
    optimize``)."""
    return re.sub(
        r"`(training|registry|server|login) ", lambda m: f"`{prog()} {m.group(1)} ", message
    )


def decode(r: httpx.Response) -> Any:
    """The JSON body of a successful response; raise :class:`CliError` with the error message."""
    ctype = r.headers.get("content-type", "")
    if r.status_code >= 400:
        msg = f"HTTP {r.status_code}"
        if "json" in ctype:
            try:
                err = r.json().get("error", {})
                msg = err.get("message") or msg
            except ValueError:
                pass
        elif r.text:
            msg = r.text.strip()[:500]
        if r.status_code == 401 and "login" not in msg:
            msg += f" (log in with `{prog()} login --token TOKEN --url URL`)"
        raise CliError(with_prog(msg))
    if "json" in ctype:
        return r.json()
    return r.content
