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

import hmac
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.exc import SQLAlchemyError

from ..db import Database
from ..db.base import utcnow, write_intent
from ..db.models.auth import ApiToken, hash_token
from ..db.models.projects import Project
from ..devtoken import DEV_PREFIX, mint_dev_token
from ..errors import InvalidRequest, NotFound, Unauthorized, Unavailable
from .context import ServiceContext

TOKEN_PREFIX = "ak_"
TINKER_PREFIX = "tml-"
"""Prefix of keys for the Tinker SDK, which refuses a key that does not start with it."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: ``kind`` is ``dev``, ``token`` or ``worker``; ``project`` scopes a token."""

    kind: str
    project: str | None = None
    token_id: str | None = None


def issue_token(ctx_db: object, project: str | None = None, *, tinker: bool = False) -> str:
    """Create and store (hashed) a new ``ak_`` token; returns the token in clear once.

    Args:
        ctx_db: the :class:`akka_optimize.db.Database` of the server's home.
        project: the name or ID of the one training project the token acts in; None
            issues an admin token (every project).
        tinker: issue a ``tml-`` key, which the Tinker SDK accepts (sent as ``X-API-Key``,
            checked like any token, also as a bearer token).

    Raises:
        NotFound: (field ``project``) no such project: a token is issued only for a
            project that exists, so create it first (with an admin or development token).
    """
    return issue_token_row(ctx_db, project, tinker=tinker)[0]


def issue_token_row(
    ctx_db: object, project: str | None = None, *, tinker: bool = False
) -> tuple[str, dict[str, Any]]:
    """As :func:`issue_token`, also returning the stored row as :func:`token_view` shows it."""

    assert isinstance(ctx_db, Database)
    token = (TINKER_PREFIX if tinker else TOKEN_PREFIX) + secrets.token_urlsafe(32)
    with ctx_db.session() as s:
        name = None
        if project is not None:
            key = project.strip()
            name = s.scalar(
                select(Project.name).where(or_(Project.name == key.lower(), Project.id == key))
            )
            if name is None:
                raise NotFound(
                    f"No training project {project!r}, so no token can act in it; create it "
                    "first with `training projects create NAME` (with an admin token), then "
                    "issue its token.",
                    field="project",
                )
        row = ApiToken(id=uuid.uuid4().hex, token_sha256=hash_token(token), project=name)
        s.add(row)
        s.flush()
        return token, token_view(row)


def token_view(row: ApiToken) -> dict[str, Any]:
    """What ``server token list`` shows of a token: never the token, nor its hash."""
    return {
        "id": row.id,
        "project": row.project,
        "scope": f"project {row.project}" if row.project else "admin (every project)",
        "createdAt": row.created_at.isoformat() if row.created_at else None,
        "revokedAt": row.revoked_at.isoformat() if row.revoked_at else None,
    }


def list_tokens(ctx_db: object) -> list[dict[str, Any]]:
    """Every issued token (not the per-attempt worker tokens), oldest first."""

    assert isinstance(ctx_db, Database)
    with ctx_db.session() as s:
        rows = s.scalars(
            select(ApiToken)
            .where(or_(ApiToken.project.is_(None), ~ApiToken.project.startswith("worker:")))
            .order_by(ApiToken.created_at, ApiToken.id)
        ).all()
        return [token_view(r) for r in rows]


def revoke_token(ctx_db: object, key: str) -> dict[str, Any]:
    """Revoke the issued token whose ID is ``key`` or starts with it; requests that carry
    it are refused with 401 from then on. Revoking twice keeps the first time.

    Raises:
        NotFound: (field ``id``) no issued token matches. InvalidRequest: several do.
    """

    assert isinstance(ctx_db, Database)
    key = key.strip().lower()
    with ctx_db.session() as s:
        rows = s.scalars(
            select(ApiToken)
            .where(ApiToken.id.startswith(key, autoescape=True))
            .where(or_(ApiToken.project.is_(None), ~ApiToken.project.startswith("worker:")))
            .limit(3)
        ).all()
        if not key or not rows:
            raise NotFound(
                f"No issued token with ID {key!r}; `server token list` shows them.", field="id"
            )
        if len(rows) > 1:
            raise InvalidRequest(
                f"Token ID prefix {key!r} matches several tokens; give more of it.", field="id"
            )
        row = rows[0]
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        s.flush()
        return token_view(row)


def authenticate(ctx: ServiceContext, authorization: str | None) -> Principal:
    """Check an ``Authorization`` header value.

    Raises:
        Unauthorized: no bearer token, or an unknown or revoked one.
        Unavailable: access cannot be checked now (retry after a few seconds).
    """
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized(
            "This request has no bearer token. Log in with `login --token TOKEN "
            "--url URL`, or create one with `server token create`."
        )
    token = authorization[7:].strip()
    if token.startswith(DEV_PREFIX):
        secret = ctx.dev_secret
        if secret and hmac.compare_digest(token, mint_dev_token(secret)):
            return Principal(kind="dev")
        raise Unauthorized("The development token does not match this server's home.")
    if not ctx.started.is_set():
        raise Unavailable("The service is still starting and cannot check access yet; retry.")
    reading = write_intent.set(False)  # a lookup: it never needs SQLite's write lock
    try:
        with ctx.db.session() as s:
            row = _token_row(s, token)
            kind = "worker" if (row.project or "").startswith("worker:") else "token"
            return Principal(kind=kind, project=row.project, token_id=row.id)
    except SQLAlchemyError as exc:
        raise Unavailable(
            f"The service cannot check access right now ({type(exc).__name__}); retry."
        ) from exc
    finally:
        write_intent.reset(reading)


_TOKEN_LOOKUP = (
    select(ApiToken.id, ApiToken.project, ApiToken.revoked_at, Project.id)
    .outerjoin(Project, Project.name == ApiToken.project)
    .where(ApiToken.token_sha256 == bindparam("digest"))
)
"""One statement per request for the token and its project (built once: its SQL and cache
key are computed once, issue 14 load)."""


@dataclass(frozen=True)
class _TokenRow:
    id: str
    project: str | None


def _token_row(s: Any, token: str) -> _TokenRow:
    """The stored row of a live token. Raises Unauthorized: unknown, revoked, or acting in
    a project that no longer exists."""
    row = s.execute(_TOKEN_LOOKUP, {"digest": hash_token(token)}).first()
    if row is None:
        raise Unauthorized("The bearer token is not known to this service.")
    token_id, project, revoked_at, project_id = row
    if revoked_at is not None:
        raise Unauthorized(
            f"The bearer token {token_id} was revoked at {revoked_at.isoformat()}; "
            "ask for a new one (`server token create`)."
        )
    scoped = project and not project.startswith("worker:")
    if scoped and project_id is None:
        raise Unauthorized(
            f"The bearer token {token_id} acts in training project {project!r}, which "
            "does not exist on this service; ask for a token of an existing project."
        )
    return _TokenRow(token_id, project)
