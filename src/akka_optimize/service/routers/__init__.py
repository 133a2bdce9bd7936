"""One router per resource. Each module exports ``router`` (authenticated routes)
and may define ``on_startup(ctx)`` / ``on_shutdown(ctx)`` hooks."""

from . import (
    adapter_imports,
    base_models,
    capacity,
    comparisons,
    curations,
    data,
    docs,
    evaluations,
    health,
    observability,
    pipelines,
    projects,
    recipes,
    run_records,
    runs,
)
from .endpoints import routes as endpoints
from .openai import chat as openai_chat
from .openai import files as openai_files
from .openai import ft_jobs as openai_ft_jobs
from .openai import graders as openai_graders
from .registry import from_tinker as registry_tinker
from .registry import routes as registry

ROUTERS = [
    health,
    docs,
    registry,
    adapter_imports,
    registry_tinker,
    projects,
    base_models,
    data,
    runs,
    run_records,
    recipes,
    endpoints,
    evaluations,
    comparisons,
    curations,
    pipelines,
    capacity,
    openai_files,
    openai_ft_jobs,
    openai_graders,
    openai_chat,
    observability,
]

__all__ = ["ROUTERS"]
