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
    precision: str = "auto",
    progress: Any = None,
) -> ServingEngine:
    """The engine named by the deployment's ``serving.engine``.

    ``precision`` (``serving.precision``) names the transformers engine's dtype; vLLM
    picks its own (``auto``) and refuses another.

    Raises:
        RuntimeError: ``vllm`` was asked for and is not installed, or with a precision
            other than ``auto``.
        ValueError: an unknown precision.
    """
    if engine == "vllm":
        from .vllm_engine import VLLMEngine  # lazy: guarded

        if precision != "auto":
            raise RuntimeError(
                f"serving.precision is {precision} but serving.engine vllm chooses its own "
                "dtype; set serving.precision: auto or serving.engine: transformers."
            )

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
        precision=precision,
    )
