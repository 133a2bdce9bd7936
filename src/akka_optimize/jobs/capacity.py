"""Capacity: device pools, project quotas, and who holds or waits for devices (issue 22).

The deployment file declares pools (a device profile × devices per node × nodes) and
quotas (devices a project may hold per pool; :class:`akka_optimize.deployment.Quotas`).
Everything that uses devices makes **claims** on pools:

- a run of any kind (supervised, reinforcement, evaluation, comparison) claims
  ``max(1, execution.gpus)`` devices of the pool of its device profile while it is
  ``PREPARING`` or ``RUNNING`` (a paused, queued or ended run holds none);
- a run graded by a ``model:`` judge (a judged evaluation or reinforcement run) also claims
  its judge endpoint, ``serving.claimDevices`` of the serving pool, for as long as it is
  active: seeds/000 "a judged reinforcement run needs quota for two claims, its training
  devices and its judge endpoint". The endpoint that serves that judge in the run's
  project is counted inside the run's claim while the run is active, never twice;
- an endpoint claims ``serving.claimDevices`` of the serving pool while it is queued to
  start, starting or ready (an idle-stopped endpoint claims none; its next request queues
  it again). On a cpu pool that is 0 unless the deployment says otherwise: an endpoint
  shares the host with the jobs.

Waiting work queues **per pool in order of submission** (a run's ``created_at``, an
endpoint's ``queued_at``): an item starts when every claim fits its pool and its project's
quota. An item that its project's quota holds back does not hold back later work of other
projects; an item that waits for busy devices does ("earlier queued work"), so a large
claim is never starved by small ones. :func:`refusal` refuses at submit (and in the dry
run) a claim that no quota or pool could ever admit.

A claim is freed when its holder ends: a cancelled or finished run at once, a worker that
died on the scheduler's next pass after its process is gone (about a second,
:mod:`akka_optimize.jobs.recovery`), a deleted endpoint at once, a stopped one when it stops.

One lock (:data:`LOCK`) orders the scheduler's starts and the endpoint manager's, so two
of them never take the same free device.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run
from ..db.models.projects import Project
from ..db.models.serving import Endpoint, EndpointModel
from ..deployment import Deployment, Pool, cuda_available
from ..errors import InvalidRequest
from . import states as S

LOCK = threading.RLock()
"""Held while a start is decided and recorded (the scheduler's pass, an endpoint's start)."""

ENDPOINT_HOLDS = ("STARTING", "READY")
"""Endpoint states that hold their claim (``QUEUED`` ones wait for it)."""

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


def _as_aware(t: dt.datetime | None) -> dt.datetime:
    if t is None:
        return utcnow()
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _plural(n: int) -> str:
    return f"{n} device" + ("" if n == 1 else "s")


def pool_of_profile(dep: Deployment, profile: str | None, kind: str) -> Pool:
    """The pool of device profile ``profile`` (the first pool declared for it), else the
    first pool of device kind ``kind`` (``cpu`` or ``cuda``), the default profile's first.

    Raises:
        InvalidRequest: no pool serves that profile or kind (the deployment's ``pools``).
    """
    pools = dep.device_pools()
    if profile:
        for p in pools:
            if p.deviceProfile.lower() == profile.lower():
                return p
    order = sorted(
        pools,
        key=lambda p: p.deviceProfile != (dep.defaultDeviceProfile or ""),
    )
    for p in order:
        prof = dep.profile(p.deviceProfile)
        if prof is not None and prof.kind == kind:
            return p
    names = ", ".join(p.name for p in pools) or "none"
    raise InvalidRequest(
        f"No device pool serves {'device profile ' + repr(profile) if profile else kind} "
        f"devices (pools: {names}); declare one under pools in the deployment file.",
        field="execution.deviceProfile",
        code="no_pool",
    )


def serving_pool(dep: Deployment) -> Pool:
    """The pool endpoints run on: ``serving.deviceProfile``'s, else that of the kind this
    machine has (cuda when present, else cpu)."""
    return pool_of_profile(dep, dep.serving.deviceProfile, "cuda" if cuda_available() else "cpu")


def endpoint_devices(dep: Deployment) -> int:
    """Devices one endpoint claims: ``serving.claimDevices``, else 1 on a cuda pool and 0
    on a cpu pool."""
    if dep.serving.claimDevices is not None:
        return dep.serving.claimDevices
    prof = dep.profile(serving_pool(dep).deviceProfile)
    return 1 if prof is not None and prof.kind == "cuda" else 0


def _add(devices: dict[str, int], pool: str, n: int) -> dict[str, int]:
    out = dict(devices)
    if n > 0:
        out[pool] = out.get(pool, 0) + n
    return out


def run_devices(
    dep: Deployment, profile: str | None, kind: str, gpus: int, judged: bool
) -> dict[str, int]:
    """The devices a run claims, by pool: ``max(1, gpus)`` of its profile's pool, plus the
    judge endpoint's claim when it is judged."""
    devices = {pool_of_profile(dep, profile, kind).name: max(1, int(gpus or 0))}
    if judged:
        devices = _add(devices, serving_pool(dep).name, endpoint_devices(dep))
    return devices


def claim_list(
    dep: Deployment,
    profile: str | None,
    kind: str,
    gpus: int,
    judged: bool,
    label: str = "training devices",
) -> list[dict[str, Any]]:
    """A run's claims as its record shows them: ``[{"for": "training devices", "pool",
    "devices"}, {"for": "judge endpoint", ...}]`` (the second for a judged run only;
    ``label`` names the first)."""
    out: list[dict[str, Any]] = [
        {
            "for": label,
            "pool": pool_of_profile(dep, profile, kind).name,
            "devices": max(1, int(gpus or 0)),
        }
    ]
    if judged:
        out.append(
            {
                "for": "judge endpoint",
                "pool": serving_pool(dep).name,
                "devices": endpoint_devices(dep),
            }
        )
    return out


def _profile_of(run: Run) -> str | None:
    r = run.resolved or {}
    return (r.get("execution") or {}).get("deviceProfile")


def _judged(run: Run) -> bool:
    return bool(((run.resolved or {}).get("grader") or {}).get("judge"))


def run_claim(dep: Deployment, run: Run) -> Claim:
    """The claim of run ``run`` (any kind)."""
    judged = _judged(run)
    return Claim(
        kind=KIND_OF_METHOD.get(run.method, "run"),
        id=run.id,
        project=run.project,
        devices=run_devices(dep, _profile_of(run), run.device_kind, run.gpus or 0, judged),
        since=_as_aware(run.created_at),
        method=run.method,
        state=run.state,
        judged=judged,
    )


def _judge_served(runs: Iterable[Run]) -> set[tuple[str, str]]:
    """``(project name, judge version)`` of every judged run in ``runs``."""
    return {(r.project, (r.resolved or {})["grader"]["judge"]) for r in runs if _judged(r)}


def _inside_run(s: Session, ep: Endpoint, project: str, judges: set[tuple[str, str]]) -> bool:
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
        since=_as_aware(ep.queued_at or ep.created_at),
        method="endpoint",
        state=ep.state,
    )


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
        its project's quota, earlier queued work, then busy devices."""
        for pool, n in claim.devices.items():
            quota = self.dep.quotas.of(claim.project, pool)
            mine = self.by_project.get((claim.project, pool), 0)
            if quota is not None and mine + n > quota:
                who = [h.label() for h in self.holders.get(pool, []) if h.project == claim.project]
                return (
                    f"project {claim.project}'s quota in pool {pool} is {_plural(quota)}, "
                    f"{mine} in use (by {', '.join(who) or 'nothing'}); it needs {n}"
                )
        for pool in claim.devices:
            first = self.blocked.get(pool)
            if first is not None:
                return f"earlier queued work: {first.label()} waits for pool {pool} first"
        for pool, n in claim.devices.items():
            size, used = self.sizes.get(pool, 0), self.used.get(pool, 0)
            if used + n > size:
                who = ", ".join(h.label() for h in self.holders.get(pool, []))
                return (
                    f"devices busy: pool {pool} has {_plural(size)}, {used} held by "
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
        try:
            out.append(run_claim(dep, r))
        except InvalidRequest:
            continue
    return out


def pool_refusal(dep: Deployment, run: Run) -> InvalidRequest | None:
    """Why ``run`` has no pool to run on (the deployment's pools changed since it was
    accepted), else None."""
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
    active = list(s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))))
    out = _claims(dep, active)
    judges = _judge_served(active)
    names = _project_names(s)
    for ep in s.scalars(select(Endpoint).where(Endpoint.state.in_(ENDPOINT_HOLDS))):
        project = names.get(ep.project_id, ep.project_id)
        if not _inside_run(s, ep, project, judges):
            out.append(endpoint_claim(dep, ep, project))
    return sorted(out, key=lambda c: c.since)


def waiting(s: Session, dep: Deployment) -> list[Claim]:
    """Every claim waiting for devices, in order of submission: queued runs (not those
    still waiting for other runs, ``resolved.after``) and queued endpoints with a claim."""
    queued = s.scalars(select(Run).where(Run.state == S.QUEUED))
    out = _claims(dep, [r for r in queued if not unfinished(s, r)])
    active = list(s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))))
    judges = _judge_served(active)
    names = _project_names(s)
    for ep in s.scalars(select(Endpoint).where(Endpoint.state == "QUEUED")):
        project = names.get(ep.project_id, ep.project_id)
        c = endpoint_claim(dep, ep, project)
        if c.devices and not _inside_run(s, ep, project, judges):
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


def refusal(
    dep: Deployment, project: str, devices: dict[str, int], what: str, field_name: str
) -> InvalidRequest | None:
    """The refusal of a claim no quota or pool can ever admit (seeds/000: "Admission refuses
    a run whose workload quota holds only one"), else None.

    Args:
        devices: the claim by pool (:func:`run_devices`).
        what: the claim in words (``2 cpu devices, its training devices and its judge
            endpoint``); field_name: the field the refusal names.
    """
    for pool, n in devices.items():
        size = next((p.devicesPerNode * p.nodes for p in dep.device_pools() if p.name == pool), 0)
        quota = dep.quotas.of(project, pool)
        if quota is not None and n > quota:
            return InvalidRequest(
                f"{field_name}: this needs {what}, but project {project}'s quota in pool "
                f"{pool} is {_plural(quota)}, so it could never start; raise "
                f"quotas.projects.{project}.{pool} in the deployment file or claim less.",
                field=field_name,
                code="quota_exceeded",
            )
        if n > size:
            return InvalidRequest(
                f"{field_name}: this needs {what}, but pool {pool} has {_plural(size)}, so "
                "it could never start; claim less or declare a larger pool.",
                field=field_name,
                code="quota_exceeded",
            )
    return None


def claim_words(devices: dict[str, int], judged: bool) -> str:
    """``2 cpu devices (its training devices and its judge endpoint)``."""
    parts = ", ".join(f"{_plural(n).replace('device', p + ' device')}" for p, n in devices.items())
    return parts + (" (its training devices and its judge endpoint)" if judged else "")


def endpoint_may_start(db: Any, dep: Deployment, endpoint_id: str) -> str | None:
    """Decide whether queued endpoint ``endpoint_id`` may start: ``None`` when it may (it is
    then recorded ``STARTING`` in the same transaction, holding its claim), else the
    sentence saying where it waits (also written to its ``activity``). An endpoint that is
    gone or no longer queued answers None (its start then finds nothing to do)."""
    with LOCK, db.session() as s:
        ep = s.get(Endpoint, endpoint_id)
        if ep is None or ep.state != "QUEUED":
            return None
        for v in verdicts(s, dep):
            if v.claim.kind == "endpoint" and v.claim.id == endpoint_id:
                if v.reason is None:
                    break
                ep.activity = "queued: " + v.sentence()
                return v.sentence()
        ep.state, ep.activity = "STARTING", "starting"
        return None


def observed_devices(kind: str) -> int:
    """Devices of kind ``kind`` this machine's executor sees: the host for ``cpu``, the
    visible CUDA devices for ``cuda``."""
    if kind == "cpu":
        return 1
    if not cuda_available():
        return 0
    import torch

    return int(torch.cuda.device_count())


def report(s: Session, dep: Deployment, project: str | None = None) -> dict[str, Any]:
    """The capacity report (``GET /v1/training/capacity``; seeds/000 "Capacity and waiting",
    seeds/001 "Capacity"): each pool's declared and observed devices and use, every holder
    and waiter (with position and reason), and each project's use against its quota.

    Args:
        project: a project name; only its holders, waiters and usage are listed (the pools'
            totals stay whole).
    """
    held = holders(s, dep)
    book = Ledger.of(dep)
    for c in held:
        book.take(c)
    queue = verdicts(s, dep, _copy(book))
    ids = {p.name: p.id for p in s.scalars(select(Project))}
    pools = []
    for p in dep.device_pools():
        prof = dep.profile(p.deviceProfile)
        kind = prof.kind if prof is not None else "cpu"
        pools.append(
            {
                "name": p.name,
                "deviceProfile": p.deviceProfile,
                "kind": kind,
                "nodes": p.nodes,
                "devicesPerNode": p.devicesPerNode,
                "declared": p.devicesPerNode * p.nodes,
                "observed": observed_devices(kind),
                "inUse": book.used.get(p.name, 0),
                "waiting": sum(1 for v in queue if p.name in v.claim.devices),
            }
        )

    def item(c: Claim) -> dict[str, Any]:
        return {
            "kind": c.kind,
            "id": c.id,
            "method": c.method,
            "state": c.state,
            "projectId": ids.get(c.project),
            "projectName": c.project,
            "devices": c.devices,
            "judged": c.judged,
            "since": c.since.isoformat(),
        }

    names = sorted({c.project for c in held} | {v.claim.project for v in queue} | set(ids))
    if project is not None:
        names = [n for n in names if n == project]
    projects = []
    for name in names:
        quota = {p.name: dep.quotas.of(name, p.name) for p in dep.device_pools()}
        projects.append(
            {
                "projectId": ids.get(name),
                "projectName": name,
                "usage": {
                    p.name: book.by_project.get((name, p.name), 0) for p in dep.device_pools()
                },
                "quota": {k: v for k, v in quota.items() if v is not None},
                "holding": [item(c) for c in held if c.project == name],
                "waiting": [
                    {
                        **item(v.claim),
                        "position": v.position,
                        "of": v.of,
                        "pool": v.pool,
                        "reason": v.reason or "starting on the scheduler's next pass",
                    }
                    for v in queue
                    if v.claim.project == name
                ],
            }
        )
    return {
        "pools": pools,
        "endpointClaim": {"pool": serving_pool(dep).name, "devices": endpoint_devices(dep)},
        "projects": projects,
    }


def _copy(book: Ledger) -> Ledger:
    return Ledger(
        book.dep,
        dict(book.sizes),
        dict(book.used),
        dict(book.by_project),
        {k: list(v) for k, v in book.holders.items()},
    )
