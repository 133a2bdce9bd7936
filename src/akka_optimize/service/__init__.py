"""The FastAPI service: one router per resource, auth, the error shape.

``create_app`` is imported on first use: the CLI's ``server token …`` commands import
:mod:`.auth` alone, without building the app's routers (about a second of imports).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app  # lazy: guarded

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
