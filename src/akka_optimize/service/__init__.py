"""The FastAPI service: one router per resource, auth, the error shape."""

from .app import create_app

__all__ = ["create_app"]
