"""Kinds of job: how one plugs into the scheduler, the worker and the event intake.

Every job is a run record (:class:`akka_optimize.db.models.jobs.Run`) whose ``method`` names
its kind. The machinery is the same for every kind (DESIGN.md "Where a run executes"): the
scheduler (:mod:`akka_optimize.jobs.scheduler`) admits a queued run when its device and base
model are ready, asks the run's kind for the attempt's :class:`~akka_optimize.jobs.spec.JobSpec`,
and launches ``python -m akka_optimize.jobs.worker SPEC.json`` through an executor; the worker
(:mod:`akka_optimize.jobs.worker`) calls the function the spec names and streams its events
back; the event intake (:mod:`akka_optimize.jobs.events`) applies the events every kind shares
(``phase``, ``data``, ``metrics``, ``validation``, ``failed``, ``paused``, ``cancelled``) and
hands any other event type to the kind's handler. Dead workers, control requests (pause,
cancel, resume) and recovery after a service restart work alike for every kind.

A kind declares three things in a :class:`JobKind`, in its own module, without editing the
scheduler or the intake, and is listed in :data:`akka_optimize.core.job_kinds.KINDS`,
which registers every kind when the service's runtime is built (importing a kind's module
registers nothing):

- ``build_spec``: the attempt's spec from a :class:`Launch` (the run, attempt number, worker
  token, base-model folder, state to resume, work folder); :meth:`Launch.spec` fills the
  fields every kind shares, so a kind passes only its own.
- ``worker``: ``"module:function"``, the function the worker process calls as
  ``function(spec, store, events, work) -> final event``; ``events.send(event)`` streams
  events, ``events.control`` is ``"pause"`` or ``"cancel"`` when the service asks to stop.
  The function returns ``{"type": "completed", "result": {...}}``, ``{"type": "paused"}`` or
  ``{"type": "cancelled"}``; an exception becomes a ``failed`` event with a sentence.
- ``events``: ``{event type: handler}`` for the event types only this kind sends, each called
  as ``handler(ctx, session, run, attempt, event)``. ``completed`` is usually one of them:
  it decides what the run's result is and ends the attempt with
  :func:`akka_optimize.jobs.records.end_attempt`.

Supervised runs (``method: sft``, :mod:`akka_optimize.jobs.supervised`) are the first kind.
An evaluation job would look like this (a sketch; ``evals`` is its own module)::

    from akka_optimize.jobs import states as S
    from akka_optimize.jobs.kinds import JobKind, Launch
    from akka_optimize.jobs.records import end_attempt
    from akka_optimize.jobs.spec import JobSpec
    from akka_optimize.registry import resolve

    def eval_spec(launch: Launch) -> JobSpec:
        run = launch.run
        questions = resolve(launch.session, "dataset", run.dataset, run.project).to_dict()
        return launch.spec(dataset=questions, extra={"metric": "accuracy"})

    def scored(ctx, session, run, att, event):  # the worker's final event
        run.results = {**(run.results or {}), **event["result"]}
        end_attempt(run, att, S.SUCCEEDED)

    EVALUATION = JobKind(
        name="eval",
        worker="akka_optimize.evals.worker:evaluate",  # evaluate(spec, store, events, work)
        build_spec=eval_spec,
        events={"completed": scored},
    )  # and EVALUATION in core/job_kinds.py's KINDS

A run whose kind is not registered fails with a sentence naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt
from ..errors import InvalidRequest
from .context import JobContext
from .spec import JobSpec

EventHandler = Callable[[JobContext, Session, Run, RunAttempt, dict[str, Any]], None]
"""``handler(ctx, session, run, attempt, event)``: applies one event of a kind's own type."""


@dataclass(frozen=True)
class Launch:
    """What the scheduler knows when it starts attempt ``attempt`` of ``run``.

    Attributes:
        session / ctx: the database session and the service context (settings, store).
        run: the run record; ``run.resolved`` holds its resolved plan.
        attempt: the attempt's number (1-based).
        token: the worker's bearer token for its events (stored hashed).
        model_dir: local folder of the run's base model (the shared model cache).
        resume_key: blob key of the saved state the attempt resumes from, or None.
        work: the attempt's folder (its spec and log are written there).
    """

    session: Session
    ctx: JobContext
    run: Run
    attempt: int
    token: str
    model_dir: Path
    resume_key: str | None
    work: Path

    def spec(self, **fields: Any) -> JobSpec:
        """A :class:`JobSpec` with the fields every kind shares filled in, plus ``fields``.

        ``extra`` given in ``fields`` is merged with the attempt's ``work_dir``.
        """

        dep = self.ctx.deployment()
        extra = {
            "work_dir": str(self.work / "scratch"),
            "retry_s": dep.service.workerRetrySeconds,  # akka_optimize.jobs.address
            **fields.pop("extra", {}),
        }
        common: dict[str, Any] = {
            "run_id": self.run.id,
            "attempt": self.attempt,
            "callback_url": self.ctx.base_url or "http://127.0.0.1:9001",
            "token": self.token,
            "blobs_url": self.ctx.settings.blobs_url or "",
            "model_dir": str(self.model_dir),
            "state_prefix": f"runs/{self.run.id}/saves",
            "device": "cuda" if self.run.device_kind == "cuda" else "cpu",
        }
        return JobSpec(**{**common, **fields, "extra": extra})


@dataclass(frozen=True)
class JobKind:
    """One kind of job, as the scheduler, the worker and the event intake see it.

    Attributes:
        name: the run's ``method`` this kind runs (``sft``).
        worker: ``"module:function"`` the worker process calls as
            ``function(spec, store, events, work)``; it returns the final event.
        build_spec: the attempt's job spec from a :class:`Launch`.
        events: handlers of the event types only this kind sends, by type.
        accept: what a plan of this kind must pass beyond the plan's own rules, called as
            ``accept(ctx, session, fields)`` with the run-record fields of
            :func:`akka_optimize.jobs.mapping.job_fields`: it raises the refusal (an
            :class:`~akka_optimize.errors.AkkaError` naming the field), or returns what
            it pinned, merged into the run's ``resolved`` at start. The dry run and the
            start both call it (:mod:`akka_optimize.jobs.admission`).
        external: the kind's runs are claimed by workers the service did not launch
            (``minifield-worker supervise``: :mod:`akka_optimize.core.recipes.runs`).
            The scheduler never launches them and they claim no pool devices or quota
            (:mod:`akka_optimize.jobs.capacity.ledger`): the claiming worker's machine is
            its own. Their events arrive through the same route, with the attempt's token.
    """

    name: str
    worker: str
    build_spec: Callable[[Launch], JobSpec]
    events: Mapping[str, EventHandler] = field(default_factory=dict)
    accept: Callable[[JobContext, Session, dict[str, Any]], dict[str, Any]] | None = None
    external: bool = False


_KINDS: dict[str, JobKind] = {}


def register_kind(kind: JobKind) -> JobKind:
    """Make ``kind`` known to the scheduler and the event intake; returns it.

    Registering a kind again under the same name replaces it (a module imported twice).
    """
    if ":" not in kind.worker:
        raise ValueError(f"JobKind {kind.name!r}: worker {kind.worker!r} is not 'module:function'")
    _KINDS[kind.name] = kind
    return kind


def registered_kinds() -> list[str]:
    """Names of the registered kinds, sorted."""
    return sorted(_KINDS)


def job_kind(name: str) -> JobKind:
    """The registered kind ``name``.

    Raises:
        InvalidRequest: no kind of that name is registered (``config.method``).
    """
    kind = _KINDS.get(name)
    if kind is None:
        known = ", ".join(registered_kinds()) or "none"
        raise InvalidRequest(
            f"config.method {name!r}: no job kind of that name is registered (registered: "
            f"{known}).",
            field="config.method",
            code="method_not_available",
        )
    return kind


def is_external(method: str) -> bool:
    """Whether runs of ``method`` are claimed by outside workers (:attr:`JobKind.external`);
    False for a kind that is not registered."""
    kind = _KINDS.get(method)
    return kind is not None and kind.external


ModelRegistered = Callable[[JobContext, Session, str, Any], Any]
"""``listener(ctx, session, project, version)``: called when a model version is registered
in ``project`` (``version`` a :class:`akka_optimize.registry.ResolvedVersion`)."""

_ON_MODEL_REGISTERED: dict[str, ModelRegistered] = {}


def on_model_registered(name: str, listener: ModelRegistered) -> None:
    """Call ``listener`` for every new model version (a run's registration or an upload),
    inside the registering transaction; registering ``name`` again replaces it. The
    evaluation settings of a project use it to queue an evaluation
    (:func:`akka_optimize.evals.settings.queue_for_registered`)."""
    _ON_MODEL_REGISTERED[name] = listener


def model_registered(ctx: JobContext, session: Session, project: str, version: Any) -> None:
    """Tell every listener that ``version`` was registered in ``project``. A listener keeps
    its own failures (it must not fail the registration)."""
    for listener in list(_ON_MODEL_REGISTERED.values()):
        listener(ctx, session, project, version)
