"""Fixtures: a live service per test, the SmolLM2 tokenizer and the tiny model.

Converted models are cached in ``$AKKA_OPTIMIZE_TEST_CACHE`` (default
``<repo>/.cache/test-models``) so a test session converts the GGUF once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

import cluster_stores
from helpers import REPO, LiveService, free_port

CACHE = Path(os.environ.get("AKKA_OPTIMIZE_TEST_CACHE", REPO / ".cache" / "test-models"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # ``make test`` runs one test process per core. Each process, and the services, job
    # workers and serving workers it starts (they inherit the environment), computes on one
    # thread: OpenMP threads of several processes spinning on two cores slowed the tiny
    # model's many small operations a hundredfold (a 40 s fixture passed its 600 s limit).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def pytest_collection_modifyitems(config, items) -> None:
    """In the PostgreSQL + S3 pass, skip the tests that read the home's own files."""
    if not cluster_stores.enabled():
        return
    skip = pytest.mark.skip(reason="reads the home's state.db or blobs/ (SQLite + folder only)")
    for item in items:
        if "local_stores" in item.keywords:
            item.add_marker(skip)


def _cached(name: str, build) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    dest = CACHE / name
    with FileLock(str(CACHE / f"{name}.lock")):
        if not (dest / "config.json").exists() and not (dest / "tokenizer.json").exists():
            build(dest)
    return dest


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir() -> Path:
    """A folder with SmolLM2-135M-Instruct's tokenizer and chat template (from the GGUF)."""
    from akka_optimize.catalog.gguf import convert_gguf, gguf_path

    return _cached("smollm2-tokenizer", lambda d: convert_gguf(gguf_path(), d, tokenizer_only=True))


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_tokenizer_dir: Path):
    """SmolLM2-135M-Instruct's fast tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)


@pytest.fixture(scope="session")
def smollm2_model_dir() -> Path:
    """The real SmolLM2-135M-Instruct converted to safetensors (fp32, ~540 MB)."""
    from akka_optimize.catalog.gguf import convert_gguf, gguf_path

    return _cached("smollm2", lambda d: convert_gguf(gguf_path(), d))


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_tokenizer_dir: Path) -> Path:
    """The tiny test model (SmolLM2 architecture, ~6 M parameters, SmolLM2 tokenizer)."""
    from akka_optimize.catalog.tiny import build_tiny_model

    return _cached("tiny-smollm2", lambda d: build_tiny_model(smollm2_tokenizer_dir, d))


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """One started service for the tests of a module that need no fresh home (issue 28
    item 5: a start costs about 2 s): they only read, or write under names no other test of
    the module uses, and change nothing the others read (deployment file, saved login)."""
    tmp = tmp_path_factory.mktemp("shared")
    with LiveService(
        home=tmp / "home", config_dir=tmp / "config", port=free_port()
    ).running() as svc:
        yield svc


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LiveService]:
    """A started service with its own home and an issued token."""
    svc = LiveService(home=tmp_path / "home", config_dir=tmp_path / "config", port=free_port())
    with svc.running():
        yield svc
