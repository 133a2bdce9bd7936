"""Capacity's ledger: who holds devices now, who waits, and in what order they may start.

:class:`Ledger` counts the devices in use per pool and per project; :func:`holders` and
:func:`waiting` list the current claims from the database; :func:`verdicts` decides each
waiting item in order of submission as the scheduler does (:class:`Verdict`). See
:mod:`akka_optimize.jobs.capacity.usage`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Run
from ...db.models.projects import Project
from ...db.models.serving import Endpoint
from ...deployment import Deployment
from ...errors import InvalidRequest
from .. import states as S
from ..kinds import is_external
from .claims import Claim, endpoint_claim, holds_devices, inside_run, judge_served, run_claim
from .pools import plural, serving_pool

ENDPOINT_HOLDS = ("STARTING", "READY")
"""Endpoint states that hold their claim (``QUEUED`` ones wait for it)."""


@dataclass
class Verdict:
    """Where a waiting item stands: ``reason`` None when it may start now.

    Attributes:
        position: its place among the waiting items of its first pool (1-based), with
            ``of`` the number waiting there.
    """

    claim: Claim
    position: int
    of: int
    pool: str
    reason: str | None = None

    def sentence(self) -> str:
        """``position 2 of 3 in pool cpu: <reason>``."""
        return f"position {self.position} of {self.of} in pool {self.pool}: {self.reason}"


@dataclass
class Ledger:
    """Devices in use per pool and per project, and the holders of each pool.

    Attributes:
        sizes: declared devices per pool.
        quotas: ``quota(project, pool) -> int | None``.
        blocked: pools where an earlier item waits for busy devices.
    """

    dep: Deployment
    sizes: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    by_project: dict[tuple[str, str], int] = field(default_factory=dict)
    holders: dict[str, list[Claim]] = field(default_factory=dict)
    blocked: dict[str, Claim] = field(default_factory=dict)

    @classmethod
    def of(cls, dep: Deployment) -> Ledger:
        """An empty ledger over ``dep``'s pools."""
        return cls(dep, {p.name: p.devicesPerNode * p.nodes for p in dep.device_pools()})

    def take(self, claim: Claim) -> None:
        """Count ``claim`` as holding its devices."""
        for pool, n in claim.devices.items():
            self.used[pool] = self.used.get(pool, 0) + n
            key = (claim.project, pool)
            self.by_project[key] = self.by_project.get(key, 0) + n
            self.holders.setdefault(pool, []).append(claim)

    def why_not(self, claim: Claim) -> str | None:
        """Why ``claim`` cannot start now (None: it fits), in the order a user acts on:
        its project's quota, earlier queued work, then busy devices. Another project's
        items are named without their IDs (:meth:`Claim.label_for`)."""
        for pool, n in claim.devices.items():
            quota = self.dep.quotas.of(claim.project, pool)
            mine = self.by_project.get((claim.project, pool), 0)
            if quota is not None and mine + n > quota:
                who = [h.label() for h in self.holders.get(pool, []) if h.project == claim.project]
                return (
                    f"project {claim.project}'s quota in pool {pool} is {plural(quota)}, "
                    f"{mine} in use (by {', '.join(who) or 'nothing'}); it needs {n}"
                )
        for pool in claim.devices:
            first = self.blocked.get(pool)
            if first is not None:
                return (
                    f"earlier queued work: {first.label_for(claim.project)} waits for pool "
                    f"{pool} first"
                )
        for pool, n in claim.devices.items():
            size, used = self.sizes.get(pool, 0), self.used.get(pool, 0)
            if used + n > size:
                who = ", ".join(h.label_for(claim.project) for h in self.holders.get(pool, []))
                return (
                    f"devices busy: pool {pool} has {plural(size)}, {used} held by "
                    f"{who or 'nothing'}; it needs {n}"
                )
        return None

    def wait(self, claim: Claim, reason: str) -> None:
        """Record that ``claim`` waits; busy devices hold back later work in its pools."""
        if reason.startswith("devices busy") or reason.startswith("earlier queued"):
            for pool in claim.devices:
                self.blocked.setdefault(pool, claim)


def _claims(dep: Deployment, runs: Iterable[Run]) -> list[Claim]:
    """The claims of ``runs``, leaving out a run on a pool the deployment no longer declares
    (the scheduler fails a queued one, naming the pool: :func:`pool_refusal`)."""
    out = []
    for r in runs:
        if is_external(r.method):  # claimed by an outside worker on its own machine
            continue
        try:
            out.append(run_claim(dep, r))
        except InvalidRequest:
            continue
    return out


def pool_refusal(dep: Deployment, run: Run) -> InvalidRequest | None:
    """Why ``run`` has no pool to run on (the deployment's pools changed since it was
    accepted), else None. A run of an external kind (:attr:`JobKind.external`) has none
    and needs none."""
    if is_external(run.method):
        return None
    try:
        run_claim(dep, run)
    except InvalidRequest as exc:
        return exc
    return None


def _project_names(s: Session) -> dict[str, str]:
    return {p.id: p.name for p in s.scalars(select(Project))}


def holders(s: Session, dep: Deployment) -> list[Claim]:
    """Every claim held now: active runs and live endpoints (not those inside a judged
    run's claim), oldest first."""
    active = [r for r in s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))) if holds_devices(r)]
    out = _claims(dep, active)
    judges = judge_served(active)
    names = _project_names(s)
    for ep in s.scalars(select(Endpoint).where(Endpoint.state.in_(ENDPOINT_HOLDS))):
        project = names.get(ep.project_id, ep.project_id)
        if not inside_run(s, ep, project, judges):
            out.append(endpoint_claim(dep, ep, project))
    return sorted(out, key=lambda c: c.since)


def waiting(s: Session, dep: Deployment) -> list[Claim]:
    """Every claim waiting for devices, in order of submission: queued runs (not those
    still waiting for other runs, ``resolved.after``) and queued endpoints with a claim."""
    queued = s.scalars(select(Run).where(Run.state == S.QUEUED))
    out = _claims(dep, [r for r in queued if not unfinished(s, r)])
    active = list(s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))))
    judges = judge_served(active)
    names = _project_names(s)
    for ep in s.scalars(select(Endpoint).where(Endpoint.state == "QUEUED")):
        project = names.get(ep.project_id, ep.project_id)
        c = endpoint_claim(dep, ep, project)
        if c.devices and not inside_run(s, ep, project, judges):
            out.append(c)
    return sorted(out, key=lambda c: (c.since, c.id))


def ledger(s: Session, dep: Deployment) -> Ledger:
    """A ledger holding every current holder's claim."""
    book = Ledger.of(dep)
    for c in holders(s, dep):
        book.take(c)
    return book


def unfinished(s: Session, run: Run) -> list[str]:
    """The IDs of the runs ``run`` waits for (``resolved.after``: a sweep's comparison waits
    for the sweep's branches) that have not ended."""
    after = (run.resolved or {}).get("after") or []
    if not after:
        return []
    ended = set(s.scalars(select(Run.id).where(Run.id.in_(after), Run.state.in_(S.TERMINAL))))
    return [r for r in after if r not in ended]


def verdicts(
    s: Session,
    dep: Deployment,
    book: Ledger | None = None,
    start: Callable[[Claim], str | None] | None = None,
) -> list[Verdict]:
    """Each waiting item's position and reason, deciding in order of submission as the
    scheduler does: an item that fits is counted as holding, so the ones after it see its
    devices taken.

    Args:
        book: the ledger to decide against (the current holders' when None); it is updated.
        start: called for each item that fits; it starts the item and returns None, or
            returns why it did not start after all (its base model is still being fetched):
            the item then takes no devices and holds back nothing.
    """
    book = book or ledger(s, dep)
    queue = waiting(s, dep)
    per_pool: dict[str, list[Claim]] = {}
    for c in queue:
        per_pool.setdefault(_first_pool(dep, c), []).append(c)
    out = []
    for c in queue:
        pool = _first_pool(dep, c)
        v = Verdict(c, per_pool[pool].index(c) + 1, len(per_pool[pool]), pool)
        v.reason = book.why_not(c)
        if v.reason is None:
            v.reason = start(c) if start is not None else None
            if v.reason is None:
                book.take(c)
        else:
            book.wait(c, v.reason)
        out.append(v)
    return out


def _first_pool(dep: Deployment, c: Claim) -> str:
    return next(iter(c.devices), serving_pool(dep).name)


def copy(book: Ledger) -> Ledger:
    return Ledger(
        book.dep,
        dict(book.sizes),
        dict(book.used),
        dict(book.by_project),
        {k: list(v) for k, v in book.holders.items()},
    )
