"""One error type for the whole platform.

Every refusal is a sentence with a machine-readable ``code``, the HTTP status it
maps to, and the ``field`` it concerns (a dotted path into the request, a file
name with a line number, or ``None``). The service turns it into
``{"error": {"code", "message", "field"}}`` (DESIGN.md "Errors are sentences");
the CLI prints ``message`` and exits 1.
"""

from __future__ import annotations

from typing import Any

EXCERPT_CHARS = 200
"""The most characters of an offending value a refusal quotes (issue 14 item 3)."""
MAX_MESSAGE_CHARS = 8000
"""A refusal's message is cut to this many characters (it lists at most a few values)."""


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how much was left out.

    Refusals quote an offending value through this, so a 50 MB value gives a short
    sentence, never the value itself.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _cap(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    cut = len(message) - MAX_MESSAGE_CHARS
    return f"{message[:MAX_MESSAGE_CHARS]}… ({cut:,} more characters left out)"


class AkkaError(Exception):
    """A refusal a user can act on.

    Args:
        message: one or more sentences saying what is wrong and what to do.
        code: a stable lower-case identifier such as ``invalid_plan``.
        field: the dotted field path, ``FILE:line N`` or ``None``.
        status: the HTTP status (400, 401, 403, 404, 409, 413, 503).
        details: extra JSON-serialisable data (for example every refusal of a dry run).
    """

    status: int = 400
    code: str = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        message = _cap(message)
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.field = field
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` object of the API's error shape."""
        body: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.details is not None:
            body["details"] = self.details
        return body


class InvalidRequest(AkkaError):
    """400: the request (plan, row, reference, flag) is malformed or refused."""

    status = 400
    code = "invalid_request"


class Unauthorized(AkkaError):
    """401: no bearer token, or one the service does not know."""

    status = 401
    code = "unauthorized"


class Forbidden(AkkaError):
    """403: the token is known but may not do this."""

    status = 403
    code = "forbidden"


class NotFound(AkkaError):
    """404: the named resource does not exist."""

    status = 404
    code = "not_found"


class Conflict(AkkaError):
    """409: the request conflicts with stored state (a name taken, a state that forbids it)."""

    status = 409
    code = "conflict"


class TooLarge(AkkaError):
    """413: an upload or an expanded archive exceeds the deployment's limit."""

    status = 413
    code = "too_large"


class Unavailable(AkkaError):
    """503: the service cannot answer now (still starting, cannot check access); retry."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 2, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after
