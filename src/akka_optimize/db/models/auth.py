"""API tokens (stored hashed)."""

from __future__ import annotations

import datetime as dt
import hashlib

from sqlalchemy import DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from ..base import Base, utcnow


def hash_token(token: str) -> str:
    """SHA-256 hex of a token, as :class:`ApiToken` stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(Base):
    """A bearer token issued by ``server token create``; only its SHA-256 is kept.

    ``project`` is the name of the one training project the token acts in (None: an admin
    token; ``worker:RUN`` for a worker attempt). ``revoked_at`` is set by ``server token
    revoke``; a revoked token is refused with 401.
    """

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    project: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
