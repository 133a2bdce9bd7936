"""What every request handler can reach: settings, database, blob store, deployment."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..db import Database
from ..settings import Settings
from ..store import BlobStore


@dataclass
class ServiceContext:
    """Process-wide state of one running service.

    ``started`` is set once migrations and every router's ``on_startup`` hook have
    run; ``startup_error`` holds the sentence when start-up failed.
    """

    settings: Settings
    db: Database
    store: BlobStore
    started: threading.Event = field(default_factory=threading.Event)
    startup_error: str | None = None
    base_url: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
