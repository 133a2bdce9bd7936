"""One router per resource. Each module exports ``router`` (authenticated routes)
and may define ``on_startup(ctx)`` / ``on_shutdown(ctx)`` hooks."""

from . import base_models, data, docs, endpoints, health, projects, registry, run_records, runs

ROUTERS = [health, docs, registry, projects, base_models, data, runs, run_records, endpoints]

__all__ = ["ROUTERS"]
