"""Capacity: device pools, project quotas, and who holds or waits for devices (issue 22).

The deployment file declares pools (a device profile × devices per node × nodes) and
quotas (devices a project may hold per pool; :class:`akka_optimize.deployment.Quotas`).
Everything that uses devices makes **claims** on pools:

- a run of any kind (supervised, reinforcement, evaluation, comparison) claims
  ``max(1, execution.gpus)`` devices of the pool of its device profile while it is
  ``PREPARING`` or ``RUNNING`` (a paused, queued or ended run holds none, nor a supervised
  run on several devices that tokenizes its rows before it claims them:
  :mod:`akka_optimize.jobs.preparation`);
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

Its parts: :mod:`akka_optimize.jobs.capacity.pools` (pools, a claim's devices, refusals),
:mod:`akka_optimize.jobs.capacity.claims` (:class:`Claim`) and
:mod:`akka_optimize.jobs.capacity.ledger` (holders, waiters, :func:`verdicts`); this module
holds the lock, decides an endpoint's start and writes the capacity report.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.projects import Project
from ...db.models.serving import Endpoint
from ...deployment import Deployment, cuda_available
from .claims import Claim as Claim
from .ledger import Ledger, copy
from .ledger import Verdict as Verdict
from .ledger import holders as holders
from .ledger import ledger as ledger
from .ledger import pool_refusal as pool_refusal
from .ledger import unfinished as unfinished
from .ledger import verdicts as verdicts
from .pools import claim_list as claim_list
from .pools import claim_words as claim_words
from .pools import endpoint_devices as endpoint_devices
from .pools import refusal as refusal
from .pools import run_devices as run_devices
from .pools import serving_pool as serving_pool

LOCK = threading.RLock()
"""Held while a start is decided and recorded (the scheduler's pass, an endpoint's start)."""


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
    queue = verdicts(s, dep, copy(book))
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
