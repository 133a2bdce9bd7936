"""Choosing the serving engine a deployment names (``serving.engine``).

The one module that knows both engines; each engine imports only
:mod:`akka_optimize.serving.engine`, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .engine import ServingEngine
from .transformers_engine import TransformersEngine


def make_engine(
    engine: str,
    base_dir: Path,
    *,
    max_context: int,
    max_adapters: int,
    max_rank: int,
    merge_adapters: bool = True,
    progress: Any = None,
) -> ServingEngine:
    """The engine named by the deployment's ``serving.engine``.

    Raises:
        RuntimeError: ``vllm`` was asked for and is not installed.
    """
    if engine == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(
            base_dir,
            max_context=max_context,
            max_adapters=max_adapters,
            max_rank=max_rank,
            progress=progress,
        )
    return TransformersEngine(
        base_dir,
        max_context=max_context,
        max_adapters=max_adapters,
        progress=progress,
        merge_adapters=merge_adapters,
    )
