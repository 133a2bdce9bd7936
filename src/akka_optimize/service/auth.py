"""Bearer-token authentication.

Two kinds of token (issue 2, seeds/000 "Smaller changes"):

- issued tokens ``ak_…`` from ``akka-optimize server token create``, stored as SHA-256;
- the development token ``dev_…``: an HMAC of a fixed label under the secret in
  ``$AKKA_OPTIMIZE_HOME/dev-secret``. The CLI mints it for a trainer at
  ``http://localhost:9001`` by reading that secret beside the server's home, so a
  developer needs no login for a local trainer.

When access cannot be checked (database unavailable, service still starting)
the answer is 503 with ``Retry-After`` rather than 401/403 (seeds/001).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from ..db.base import write_intent
from ..db.models.auth import ApiToken
from ..errors import Unauthorized, Unavailable
from .context import ServiceContext

DEV_LABEL = b"akka-optimize development token v1"
DEV_PREFIX = "dev_"
TOKEN_PREFIX = "ak_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: ``kind`` is ``dev``, ``token`` or ``worker``; ``project`` scopes a token."""

    kind: str
    project: str | None = None
    token_id: str | None = None


def dev_secret_path(home: Path) -> Path:
    """Where the development-token secret lives in a server home."""
    return home / "dev-secret"


def ensure_dev_secret(home: Path) -> bytes:
    """Create (mode 0600) or read the development-token secret of ``home``."""
    p = dev_secret_path(home)
    if not p.exists():
        home.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        os.replace(tmp, p)
    return p.read_text().strip().encode()


def mint_dev_token(secret: bytes) -> str:
    """The development token for a server whose secret is ``secret``."""
    return DEV_PREFIX + hmac.new(secret, DEV_LABEL, hashlib.sha256).hexdigest()


def hash_token(token: str) -> str:
    """SHA-256 hex of a token, as stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(ctx_db: object, project: str | None = None) -> str:
    """Create and store (hashed) a new ``ak_`` token; returns the token in clear once."""
    from ..db import Database

    assert isinstance(ctx_db, Database)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with ctx_db.session() as s:
        s.add(ApiToken(id=uuid.uuid4().hex, token_sha256=hash_token(token), project=project))
    return token


def authenticate(ctx: ServiceContext, authorization: str | None) -> Principal:
    """Check an ``Authorization`` header value.

    Raises:
        Unauthorized: no bearer token, or an unknown one.
        Unavailable: access cannot be checked now (retry after a few seconds).
    """
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized(
            "This request has no bearer token. Log in with `login --token TOKEN "
            "--url URL`, or create one with `server token create`."
        )
    token = authorization[7:].strip()
    if token.startswith(DEV_PREFIX):
        secret = ctx.extras.get("dev_secret")
        if secret and hmac.compare_digest(token, mint_dev_token(secret)):
            return Principal(kind="dev")
        raise Unauthorized("The development token does not match this server's home.")
    if not ctx.started.is_set():
        raise Unavailable("The service is still starting and cannot check access yet; retry.")
    reading = write_intent.set(False)  # a lookup: it never needs SQLite's write lock
    try:
        with ctx.db.session() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_sha256 == hash_token(token)))
    except SQLAlchemyError as exc:
        raise Unavailable(
            f"The service cannot check access right now ({type(exc).__name__}); retry."
        ) from exc
    finally:
        write_intent.reset(reading)
    if row is None:
        raise Unauthorized("The bearer token is not known to this service.")
    kind = "worker" if (row.project or "").startswith("worker:") else "token"
    return Principal(kind=kind, project=row.project, token_id=row.id)
