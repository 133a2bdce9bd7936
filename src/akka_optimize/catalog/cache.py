"""The shared weights cache, as runs and endpoints see it.

Jobs and serving call :func:`ready_model_dir` with a run's ``baseModel`` to find the
folder to load (seeds/000 "Base model flexibility": a selected model "trains or serves
without further setup", and "every run and endpoint reads them from the shared volume").
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from ..settings import Settings
from .entries import CatalogEntry
from .selection import require_ready, settings_catalog


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


def tokenizer_dir(session: Session, settings: Settings, ref: str) -> Path:
    """The folder holding the tokenizer and chat template of base model ``ref``; the same
    folder as :func:`ready_model_dir` (a model directory carries its tokenizer).

    Raises:
        NotFound, Conflict: as :func:`ready_model_dir`.
    """
    return ready_model_dir(session, settings, ref)[0]
