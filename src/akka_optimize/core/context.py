"""What every request handler can reach: the service's runtime, built once at start.

:func:`akka_optimize.service.runtime.build_context` makes the :class:`ServiceContext`
(settings, state store, blob store, the development secret, the fork server) and registers
the job kinds;
:func:`akka_optimize.service.runtime.start` adds the executor and the scheduler; the
managers of endpoints and base-model fetches are made on first use. Every field is typed;
nothing is kept under a string key (issue 49 item 2). Jobs, evaluations, Tinker sessions
and the OpenAI fine-tuning core read it through
:class:`akka_optimize.jobs.context.JobContext`, which it satisfies.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..catalog.selection.manager import SelectionManager
from ..db import Database
from ..deployment import Deployment, load_deployment
from ..forkserver import Forker
from ..jobs.executor import Executor
from ..jobs.scheduler import Scheduler
from ..serving.manager import EndpointManager
from ..settings import Settings
from ..store import BlobStore
from ..tinker.broker import Broker


@dataclass
class ServiceContext:
    """Process-wide state of one running service.

    Attributes:
        settings / db / store: the settings, the state store and the blob store.
        dev_secret: the secret the development token is minted from (the home's).
        started: set once migrations, every router's ``on_startup`` hook and the runtime
            (:func:`akka_optimize.service.runtime.start`) have run; ``startup_error``
            holds the sentence when start-up failed.
        base_url: the address workers send their events to (None until known).
        executor: where run attempts and serving workers are launched (start-up).
        scheduler: the scheduler's thread (start-up; stopped at shutdown).
        endpoints: the endpoint manager (on first use).
        base_models: the manager of base-model fetches (on first use).
        tinker_broker: the Tinker sessions' broker (futures, models, samplers).
        forker: the fork server CPU workers are forked from (run attempts, serving workers,
            post-deploy checks); started on the first such worker, stopped at shutdown.
    """

    settings: Settings
    db: Database
    store: BlobStore
    dev_secret: bytes
    started: threading.Event = field(default_factory=threading.Event)
    startup_error: str | None = None
    base_url: str | None = None
    executor: Executor | None = None
    scheduler: Scheduler | None = None
    endpoints: EndpointManager | None = None
    base_models: SelectionManager | None = None
    tinker_broker: Broker = field(default_factory=Broker)
    forker: Forker = field(default_factory=Forker)

    def deployment(self) -> Deployment:
        """The deployment file the settings name, parsed
        (:func:`akka_optimize.deployment.load_deployment`: kept while the file is unchanged
        on disk and read again when an operator edits it, so no restart is needed).

        Raises:
            InvalidRequest: the file is not valid YAML or breaks the schema, naming the
                file and the field.
        """
        return load_deployment(self.settings.resolved_deployment_file())
