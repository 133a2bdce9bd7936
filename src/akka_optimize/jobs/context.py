"""What jobs, evaluations, Tinker sessions and the OpenAI fine-tuning core reach of the
running service, as a type.

The service's :class:`akka_optimize.core.context.ServiceContext` is built once at start
(:func:`akka_optimize.service.runtime.build_context`: settings, state store, blob store,
its own address, then the executor and the scheduler) and passed explicitly to every
function that needs it. ``jobs/`` (and ``evals/``, ``tinker/``, ``core/``, which import it)
may not import the service (README "Layout"), so they name the part they read with this
:class:`~typing.Protocol`; the service's context satisfies it by its fields.
"""

from __future__ import annotations

from typing import Protocol

from ..db import Database
from ..deployment import Deployment
from ..settings import Settings
from ..store import BlobStore


class JobContext(Protocol):
    """The running service as its jobs see it.

    Attributes:
        settings: the service's settings (home, state and blob URLs, deployment file).
        db: the state store.
        store: the blob store.
        base_url: the address workers send their events to (None until it is known).
    """

    settings: Settings
    db: Database
    store: BlobStore
    base_url: str | None

    def deployment(self) -> Deployment:
        """The deployment file the settings name, parsed (read again when it changes)."""
        ...
