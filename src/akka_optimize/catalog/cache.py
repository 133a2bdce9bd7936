"""The shared weights cache, as runs and endpoints see it.

Jobs and serving call :func:`ready_model_dir` with a run's ``baseModel`` to find the
folder to load (seeds/000 "Base model flexibility": a selected model "trains or serves
without further setup", and "every run and endpoint reads them from the shared volume").
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..lazy_imports import transformers_names
from ..settings import Settings
from .entries import CatalogEntry
from .selection.machine import require_ready, settings_catalog


def ready_model_dir(session: Session, settings: Settings, ref: str) -> tuple[Path, CatalogEntry]:
    """The model directory (``config.json``, safetensors, tokenizer and chat template) of
    a selected, ``READY`` base model, and its catalog entry.

    Args:
        session: a database session.
        settings: the service settings (deployment file, weights cache).
        ref: ``Owner/Repo`` (any case), ``owner/repo@commit``, or a registry reference of a
            base-model version (``owner/repo:v1``, ``owner/repo:ALIAS``,
            ``owner/repo@sha256:…``), whose commit must be the cached one.

    Returns:
        ``(path, entry)``; load the path with ``entry.auto_class.from_pretrained(path)``.

    Raises:
        NotFound: (``code`` ``not_in_catalog``) the catalog does not allow ``ref``.
        Conflict: not selected (``base_model_not_selected``), still fetching or weights
            gone (``base_model_not_ready``), failed (``base_model_failed``, with the
            reason), or a version other than the cached one
            (``base_model_version_mismatch``).
    """
    return require_ready(session, settings_catalog(settings), ref)


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str, _mtime: float) -> Any:
    (auto_tokenizer,) = transformers_names("AutoTokenizer")
    return auto_tokenizer.from_pretrained(path)


def load_tokenizer(path: Path) -> Any:
    """The tokenizer in folder ``path``, cached while the folder is unchanged (a dry run
    and the start that follows load it once)."""
    return _load_tokenizer(str(path), path.stat().st_mtime)


def tokenizer_dir(session: Session, settings: Settings, ref: str) -> Path:
    """The folder holding the tokenizer and chat template of base model ``ref``; the same
    folder as :func:`ready_model_dir` (a model directory carries its tokenizer).

    Raises:
        NotFound, Conflict: as :func:`ready_model_dir`.
    """
    return ready_model_dir(session, settings, ref)[0]
