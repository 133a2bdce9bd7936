"""The selection row of a base model: its states (``PENDING`` → ``FETCHING`` → ``READY``
or ``FAILED``), finding it by repository, whether its weights are cached, and the
catalog of the deployment file the settings name.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.catalog import BaseModelSelection
from ...deployment import load_deployment
from ...settings import Settings
from ..entries import Catalog, load_catalog

PENDING, FETCHING, READY, FAILED = "PENDING", "FETCHING", "READY", "FAILED"
STATES = (PENDING, FETCHING, READY, FAILED)


def settings_catalog(settings: Settings) -> Catalog:
    """The catalog of the deployment file ``settings`` points at (shipped when none)."""

    return load_catalog(load_deployment(settings.resolved_deployment_file()))


def get_selection(session: Session, repository: str) -> BaseModelSelection | None:
    """The selection row of ``repository`` (any case), or None."""
    key = repository.strip().split("@", 1)[0].split(":", 1)[0].lower()
    return session.scalars(
        select(BaseModelSelection).where(BaseModelSelection.repository_key == key)
    ).first()


def cached(row: BaseModelSelection | None) -> bool:
    """Whether the row's weights are in the cache now (``config.json`` present)."""
    return bool(row and row.weights_path and (Path(row.weights_path) / "config.json").is_file())
