"""Fixtures of the serving tests: LoRA adapters of the tiny model and a running worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock
from serving_assets import CACHE, INSTRUCTIONS, make_random_adapter, train_tool_adapter


@pytest.fixture(scope="session")
def lora_dirs(tiny_model_dir: Path, tmp_path_factory) -> dict[str, Path]:
    """Two random-init LoRA adapters (``alpha``, ``beta``) and the trained tool adapter."""
    root = tmp_path_factory.mktemp("adapters")
    tools = CACHE / "serving-tool-adapter-v3"
    with FileLock(str(CACHE / "serving-tool-adapter-v3.lock")):
        if not (tools / "adapter_config.json").exists():
            train_tool_adapter(tiny_model_dir, tools)
    return {
        "alpha": make_random_adapter(tiny_model_dir, root / "alpha", seed=1),
        "beta": make_random_adapter(tiny_model_dir, root / "beta", seed=2),
        "tools": tools,
    }


@pytest.fixture(scope="session")
def worker(tiny_model_dir: Path, lora_dirs: dict[str, Path], tmp_path_factory) -> Iterator:
    """A worker process serving the tiny model with the three adapters."""
    from akka_optimize.forkserver import Forker
    from akka_optimize.serving.process import start_worker

    spec = {
        "base": {"name": "tiny/base", "dir": str(tiny_model_dir), "instructions": None},
        "adapters": [
            {"name": "proj/alpha:v1", "path": str(lora_dirs["alpha"]), "instructions": None},
            {"name": "proj/beta:v1", "path": str(lora_dirs["beta"]), "instructions": None},
            {
                "name": "proj/tools:v1",
                "path": str(lora_dirs["tools"]),
                "instructions": INSTRUCTIONS,
            },
        ],
        "maxContext": 512,
        "maxRank": 64,
    }
    forker = Forker()
    w = start_worker(spec, tmp_path_factory.mktemp("worker"), forker)
    try:
        w.wait_ready(timeout=120)
        yield w
    finally:
        w.stop()
        forker.stop()
        print(json.dumps(w.status()))
