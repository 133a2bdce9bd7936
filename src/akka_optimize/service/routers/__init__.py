"""One router per resource. Each module exports ``router`` (authenticated routes)
and may define ``on_startup(ctx)`` / ``on_shutdown(ctx)`` hooks."""

from . import base_models, data, endpoints, health, projects, registry, runs

ROUTERS = [health, registry, projects, base_models, data, runs, endpoints]

__all__ = ["ROUTERS"]
