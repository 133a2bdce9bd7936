"""Every kind of job the service runs, listed in one place (issue 49 item 2).

A kind's module declares its :class:`~akka_optimize.jobs.kinds.JobKind` and registers
nothing when it is imported; :func:`install` registers the kinds of :data:`KINDS`, and the
hooks that go with them (a scheduler pass moves pipelines on and fails silent recipe
workers; a registered model version queues its project's evaluation), when the service's
runtime is built (:func:`akka_optimize.service.runtime.build_context`, called by
:func:`akka_optimize.service.app.create_app`). A kind missing here is unknown to the
scheduler, the event intake and the dry run, which refuse it naming ``config.method``.

The OpenAI fine-tuning API (:mod:`akka_optimize.core.openai_ft`) is no kind of its own:
its jobs are runs of ``sft``, ``dpo`` and ``rl``.
"""

from __future__ import annotations

from ..evals.curation.kind import CURATION
from ..evals.kind import COMPARISON, EVALUATION
from ..evals.settings import queue_for_registered
from ..jobs.kinds import JobKind, on_model_registered, register_kind
from ..jobs.preference import PREFERENCE
from ..jobs.scheduler import on_tick
from ..jobs.supervised import SUPERVISED
from ..reinforcement.kind import REINFORCEMENT
from ..tinker.kind import TINKER
from .pipelines import records as pipelines
from .recipes.runs import RECIPE, reap_silent

KINDS: tuple[JobKind, ...] = (
    SUPERVISED,
    PREFERENCE,
    REINFORCEMENT,
    EVALUATION,
    COMPARISON,
    CURATION,
    TINKER,
    RECIPE,
)
"""The job kinds, by their ``method``: ``sft``, ``dpo``, ``rl``, ``eval``, ``compare``,
``curate``, ``tinker`` and ``recipe``."""


def install() -> None:
    """Register every kind of :data:`KINDS` and the hooks that go with them. Idempotent:
    registering a kind or a hook again under its name replaces it."""
    for kind in KINDS:
        register_kind(kind)
    on_tick("pipelines", pipelines.advance_all)
    on_tick("recipes", reap_silent)
    on_model_registered("evaluation-settings", queue_for_registered)
