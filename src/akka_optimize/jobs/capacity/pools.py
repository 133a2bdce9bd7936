"""Capacity's pools: which pool a claim falls on, how many devices it takes, and refusals.

Pure functions of the deployment (no database): the pool of a device profile or kind
(:func:`pool_of_profile`), the serving pool and an endpoint's claim, a run's devices by pool
(:func:`run_devices`, :func:`claim_list`), and the refusal of a claim no quota or pool could
ever admit (:func:`refusal`). The rest of capacity is :mod:`akka_optimize.jobs.capacity.usage`.
"""

from __future__ import annotations

from typing import Any

from ...deployment import Deployment, Pool, cuda_available
from ...errors import InvalidRequest


def plural(n: int) -> str:
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
                f"{pool} is {plural(quota)}, so it could never start; raise "
                f"quotas.projects.{project}.{pool} in the deployment file or claim less.",
                field=field_name,
                code="quota_exceeded",
            )
        if n > size:
            return InvalidRequest(
                f"{field_name}: this needs {what}, but pool {pool} has {plural(size)}, so "
                "it could never start; claim less or declare a larger pool.",
                field=field_name,
                code="quota_exceeded",
            )
    return None


def claim_words(devices: dict[str, int], judged: bool) -> str:
    """``2 cpu devices (its training devices and its judge endpoint)``."""
    parts = ", ".join(f"{plural(n).replace('device', p + ' device')}" for p, n in devices.items())
    return parts + (" (its training devices and its judge endpoint)" if judged else "")
