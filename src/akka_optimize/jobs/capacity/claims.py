"""Capacity's claims: what one run or endpoint holds or asks for (:class:`Claim`).

A run's claim (:func:`run_claim`: its devices, plus its judge endpoint's when judged) and an
endpoint's (:func:`endpoint_claim`), and whether an endpoint's claim is already part of an
active judged run's (:func:`_inside_run`). See :mod:`akka_optimize.jobs.capacity.usage`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.base import utcnow
from ...db.models.jobs import Run
from ...db.models.serving import Endpoint, EndpointModel
from ...deployment import Deployment
from .pools import endpoint_devices, run_devices, serving_pool

KIND_OF_METHOD = {"eval": "evaluation", "compare": "comparison"}


@dataclass(frozen=True)
class Claim:
    """What one item holds or asks for.

    Attributes:
        kind: ``run``, ``evaluation``, ``comparison`` or ``endpoint``.
        id: the run's or endpoint's ID.
        project: the project's name.
        devices: ``{pool name: devices}``; more than one pool for a judged run whose
            judge serves on another pool.
        since: when it was submitted (its place in the queue).
        method: the run's method (``sft``, ``rl``, ``eval``, ``compare``), or ``endpoint``.
        state: the run's or endpoint's state.
        judged: whether part of the claim is a judge endpoint.
    """

    kind: str
    id: str
    project: str
    devices: dict[str, int]
    since: dt.datetime
    method: str
    state: str
    judged: bool = False

    def label(self) -> str:
        """``run 1a2b…``, ``evaluation …``, ``endpoint …``."""
        return f"{self.kind} {self.id}"

    def label_for(self, project: str) -> str:
        """:meth:`label` as a sentence read by ``project`` shows it: another project's item
        is ``another project's run`` (issue 48 item 4: no other project's IDs)."""
        return self.label() if self.project == project else f"another project's {self.kind}"


def as_aware(t: dt.datetime | None) -> dt.datetime:
    if t is None:
        return utcnow()
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _profile_of(run: Run) -> str | None:
    r = run.resolved or {}
    return (r.get("execution") or {}).get("deviceProfile")


def _judged(run: Run) -> bool:
    return bool(((run.resolved or {}).get("grader") or {}).get("judge"))


UNCLAIMED = "unclaimed"
"""``run.results["preparation"]`` while a supervised run on several devices tokenizes its
rows before it claims them (F071; :mod:`akka_optimize.jobs.preparation`)."""


def holds_devices(run: Run) -> bool:
    """Whether active run ``run`` holds its devices: not while it tokenizes its rows before
    claiming them (seeds/001 "tokenizes its rows before claiming GPUs")."""
    return (run.results or {}).get("preparation") != UNCLAIMED


def run_claim(dep: Deployment, run: Run) -> Claim:
    """The claim of run ``run`` (any kind)."""
    judged = _judged(run)
    return Claim(
        kind=KIND_OF_METHOD.get(run.method, "run"),
        id=run.id,
        project=run.project,
        devices=run_devices(dep, _profile_of(run), run.device_kind, run.gpus or 0, judged),
        since=as_aware(run.created_at),
        method=run.method,
        state=run.state,
        judged=judged,
    )


def judge_served(runs: Iterable[Run]) -> set[tuple[str, str]]:
    """``(project name, judge version)`` of every judged run in ``runs``."""
    return {(r.project, (r.resolved or {})["grader"]["judge"]) for r in runs if _judged(r)}


def inside_run(s: Session, ep: Endpoint, project: str, judges: set[tuple[str, str]]) -> bool:
    """Whether ``ep`` serves the judge of an active judged run of its project (its claim is
    then part of that run's)."""
    if not judges:
        return False
    rows = list(s.scalars(select(EndpointModel).where(EndpointModel.endpoint_id == ep.id)))
    return len(rows) == 1 and (project, rows[0].pinned) in judges


def endpoint_claim(dep: Deployment, ep: Endpoint, project: str) -> Claim:
    """The claim of endpoint ``ep`` of project ``project`` (a name)."""
    n = endpoint_devices(dep)
    return Claim(
        kind="endpoint",
        id=ep.id,
        project=project,
        devices={serving_pool(dep).name: n} if n else {},
        since=as_aware(ep.queued_at or ep.created_at),
        method="endpoint",
        state=ep.state,
    )
