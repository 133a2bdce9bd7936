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
    endpoints,
    evaluations,
    health,
    observability,
    openai_chat,
    openai_files,
    openai_ft_jobs,
    openai_graders,
    pipelines,
    projects,
    recipes,
    registry,
    registry_tinker,
    run_records,
    runs,
)

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
