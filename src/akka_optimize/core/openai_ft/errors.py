"""OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``.

OpenAI's API answers every refusal in this shape (platform.openai.com/docs/guides/error-codes);
the openai SDK raises ``BadRequestError`` (400), ``NotFoundError`` (404), ... from the status
and reads ``error.message``. This module holds the exception the core raises and its
conversion from the platform's own :class:`akka_optimize.errors.AkkaError`.
"""

from __future__ import annotations

from typing import Any

from ...errors import AkkaError

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}
"""OpenAI's ``error.type`` per HTTP status."""


class OpenAIError(Exception):
    """A refusal in OpenAI's shape.

    Attributes:
        message: one sentence naming what is wrong and, where known, what to do.
        param: the request field at fault (``method.type``, ``hyperparameters.n_epochs``,
            ``training_file``), or None.
        code: a short machine-readable code (``invalid_value``, ``model_not_available``).
        status: the HTTP status (400 by default).
        headers: extra answer headers (``Retry-After`` on a 503).
    """

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = "invalid_value",
        status: int = 400,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON answer: ``{"error": {"message", "type", "param", "code"}}``."""
        kind = TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }


def from_platform(exc: AkkaError, param_map: dict[str, str] | None = None) -> OpenAIError:
    """The OpenAI-shaped twin of a platform refusal: same status and message; ``param`` is
    the platform field renamed through ``param_map`` (a plan path → the OpenAI field that
    set it), else kept as is."""
    field = getattr(exc, "field", None)
    if field and param_map:
        for prefix, name in param_map.items():
            if field == prefix or field.startswith(prefix + "."):
                field = name
                break
    return OpenAIError(
        exc.message, field, getattr(exc, "code", None) or "invalid_value", exc.status
    )
