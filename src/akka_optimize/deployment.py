"""The deployment file: what this installation allows and can do.

One YAML file (``$AKKA_OPTIMIZE_DEPLOYMENT``, else ``$AKKA_OPTIMIZE_HOME/deployment.yaml``,
else the default shipped beside this module, ``deployment.yaml``) declares device
profiles, serving limits, registry limits, which memory and engine settings a
plan may state, and the base-model catalog. Ceilings in plan refusals come from
here and from the base model's catalog entry (DESIGN.md "One picture").

Sections are owned by the package that reads them: ``deviceProfiles``,
``memorySettings`` and ``engineSettings`` by :mod:`akka_optimize.plan`; ``serving`` by
:mod:`akka_optimize.serving`; ``limits`` by :mod:`akka_optimize.registry`; ``service`` by
:mod:`akka_optimize.service` (and the worker's retry window, by :mod:`akka_optimize.jobs`);
``catalog`` by :mod:`akka_optimize.catalog`; ``grafana`` by the service's metrics routes; ``pools`` and ``quotas`` (with
``serving.claimDevices``) by the scheduler's capacity (:mod:`akka_optimize.jobs.capacity.usage`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from .deployment_plan import MEMORY_SETTINGS as MEMORY_SETTINGS
from .deployment_plan import EngineSettingsPolicy, MemorySettingsPolicy
from .deployment_plan import Strict as _Strict
from .deployment_plan import ValueRange as ValueRange
from .errors import InvalidRequest


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """Whether this machine has a CUDA device (torch imported on first use only)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


DEFAULT_FILE = Path(__file__).with_name("deployment.yaml")


class DeviceProfile(_Strict):
    """An accelerator (or the CPU) a run can name with ``execution.deviceProfile``."""

    name: str
    kind: Literal["cpu", "cuda"]
    deviceMemoryGiB: float | None = Field(None, description="Memory of one device; None for CPU.")
    hostMemoryGiB: float = Field(description="Host memory a run on this node may use.")
    devicesPerNode: int = Field(1, ge=1)
    measured: bool = Field(False, description="Whether the envelope was measured by a run.")


class ServingLimits(_Strict):
    """What an endpoint can serve (``training endpoints info``)."""

    engine: Literal["transformers", "vllm"] = "transformers"
    maxLoraRank: int = Field(64, ge=1, description="Largest adapter rank an endpoint loads.")
    maxAdaptersLoaded: int = Field(8, ge=1)
    maxContextTokens: int = Field(8192, ge=1)
    idleSeconds: int = Field(900, ge=1, description="Idle time before an endpoint stops.")
    mergeAdapters: bool = Field(
        True,
        description="transformers engine: fold the adapter being served into the base weights "
        "(an adapter then decodes as fast as the base model; costs a copy of the adapted "
        "modules' weights and one merge per switch between models).",
    )
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="transformers engine: the dtype endpoint and evaluation weights are "
        "held and decoded in. auto: bf16 on cuda, fp32 on cpu. bf16 on a CPU halves the "
        "bytes a decoding step reads (about 2x the fp32 tokens/s where the CPU has bf16 "
        "instructions); answers then follow bf16 rounding, and the post-deploy check "
        "compares them with the trainer's sampling in bf16.",
    )
    reservedDevices: int = Field(0, ge=0)
    deviceProfile: str | None = Field(
        None,
        description="Device profile endpoints run on (their pool); None: the pool of the "
        "kind this machine has (cuda when present, else cpu).",
    )
    claimDevices: int | None = Field(
        None,
        ge=0,
        description="Devices each endpoint claims from its pool while it is queued to "
        "start, starting or ready (an idle-stopped endpoint claims none); None: 1 on a cuda "
        "pool, 0 on a cpu pool, where an endpoint shares the host with the jobs.",
    )

    @model_validator(mode="after")
    def _precision_is_the_transformers_engines(self) -> ServingLimits:
        if self.engine == "vllm" and self.precision != "auto":
            raise ValueError(
                f"serving.precision: {self.precision} applies to the transformers engine; "
                "vLLM chooses its own dtype (set auto)"
            )
        return self


class RegistryLimits(_Strict):
    """Upload limits (seeds/001 "Other changes")."""

    uploadBytes: int = Field(
        256 * 1024**2, description="Largest dataset upload or pushed image, in bytes."
    )
    bundleCompressedBytes: int = Field(
        256 * 1024**2, description="Largest bundle or model archive as sent, in bytes."
    )
    bundleExpandedBytes: int = Field(
        2 * 1024**3, description="Largest bundle or model archive once unpacked, in bytes."
    )
    bundleFiles: int = Field(10_000, description="Most files in one bundle or model archive.")
    annotationBytes: int = Field(
        64 * 1024,
        ge=1,
        description="Largest JSON size of one version's annotations after a merge.",
    )


class ServiceLimits(_Strict):
    """Limits of the service itself (issue 14 items 3 and 8)."""

    jsonBodyBytes: int = Field(
        8 * 1024**2,
        ge=1,
        description="Largest JSON request body (plans, annotations, events, previews); "
        "uploads have their own limits.",
    )
    workerRetrySeconds: int = Field(
        300,
        ge=1,
        description="How long a worker retries a service it cannot reach (re-reading the "
        "service's address from the blob store) before it ends its attempt.",
    )
    tinkerIdleSeconds: int = Field(
        1800,
        ge=1,
        description="A Tinker training client with no call for this long saves its state "
        "(tinker://MODEL_ID/weights/idle) and ends, releasing its device.",
    )
    tinkerHeartbeatSeconds: int = Field(
        45,
        ge=15,
        description="A Tinker client's session whose SDK sends no heartbeat for this long "
        "(the SDK beats every 10 s; a client killed without close()) ends its training and "
        "sampling clients: a training client saves its state "
        "(tinker://MODEL_ID/weights/heartbeat) and its device is released.",
    )
    startupTimeoutSeconds: float = Field(
        600,
        gt=0,
        description="A supervised run on several devices that tokenizes its rows before it "
        "claims them fails with a sentence when that preparation reports no progress for "
        "this long (seeds/001 PREPARING).",
    )
    recipeHeartbeatSeconds: int = Field(
        300,
        ge=1,
        description="A claimed recipe run whose minifield-worker sends no event for this "
        "long fails with a sentence (the worker is gone); a live worker sends a heartbeat "
        "every quarter of it.",
    )
    recipeRoots: list[str] = Field(
        default_factory=list,
        description="Absolute folders under which a submitted recipe's model.path and "
        "data.path may lie (links are followed only while they stay inside one); empty: the "
        "service reads no recipe path, so recipe submission is refused.",
    )


class GraderLimits(_Strict):
    """Limits of each call of a user's grader function (issue 17 item 1; the sandbox is
    :mod:`akka_optimize.evals.sandbox.pool`). A call that passes one scores its example as an
    error, with the limit named."""

    cpuSeconds: float = Field(10, gt=0, description="CPU time of one grader call.")
    wallSeconds: float = Field(30, gt=0, description="Wall-clock time of one grader call.")
    memoryMiB: int = Field(1024, ge=16, description="Address space of a grader process.")
    workers: int = Field(2, ge=1, le=64, description="Grader processes of one evaluation.")


class OpenAIFineTuning(_Strict):
    """What a reinforcement job created through OpenAI's fine-tuning API samples (issue 51):
    that API has no field for it. None: the plan's default (``rlHyperparams``)."""

    maxNewTokens: int | None = Field(
        None, ge=1, le=32768, description="rlHyperparams.maxNewTokens of such a job."
    )
    samplesPerPrompt: int | None = Field(
        None, ge=2, le=64, description="rlHyperparams.samplesPerPrompt of such a job."
    )


class JobStorage(_Strict):
    """What the training jobs can read (seeds/001 "Optimize refuses a run, a pipeline, or an
    evaluation whose dataset or scoring bundle its training jobs cannot read"; F019).

    ``readable`` lists locations, as fsspec URLs (``s3://bucket/prefix``) or absolute local
    paths, under which the jobs' executor can read blobs; None means the service's own blob
    store, wherever it is (a local executor reads it). A dataset or bundle whose blob lies
    under none of them is refused at submit, before a device is claimed, naming the part
    of its location that did not match (:mod:`akka_optimize.jobs.readable`).
    """

    readable: list[str] | None = Field(
        None,
        description="Locations the jobs can read (s3://bucket/prefix or /abs/path); null: the "
        "service's blob store.",
    )


class ExecutorSettings(_Strict):
    """Where the jobs' workers run (DESIGN.md "Where a run executes"; issue 25).

    ``local`` starts each attempt's worker as a subprocess of the service. ``ray`` places it
    on a Ray cluster (``pip install 'akka-optimize[ray]'``) as a detached actor that runs
    the same worker command with the same job spec and token: its devices are reserved as
    Ray resources (``resources`` per device profile kind; one CPU for ``cpu``, one GPU for
    ``cuda`` unless set), and liveness, exit code and kill map to the actor's; a cluster that
    does not answer keeps the job in its phase for ``outageSeconds``, then ends it. The job
    spec, the worker's log and the Python environment are read at the same paths on the
    node, so a cluster shares the service's home and installs the same package.
    """

    kind: Literal["local", "ray"] = Field("local", description="local subprocesses or Ray.")
    address: str | None = Field(
        None, description="Ray cluster address (host:port, ray://host:port, or auto)."
    )
    namespace: str = Field("akka-optimize", description="Ray namespace of the job actors.")
    nodeIpAddress: str | None = Field(
        None,
        description="The service's address as a Ray node sees it (Ray's _node_ip_address); "
        "null: Ray's own guess. 127.0.0.1 for a one-machine cluster started with "
        "--node-ip-address 127.0.0.1.",
    )
    resources: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Ray resources each worker reserves, by device kind (cpu, cuda): "
        "{num_cpus, num_gpus, or a custom resource name: amount}.",
    )
    outageSeconds: float = Field(
        900.0,
        gt=0,
        description="How long a job keeps its phase while the Ray cluster does not answer "
        "before its attempt ends with a sentence saying so (seconds).",
    )

    @model_validator(mode="after")
    def _ray_needs_an_address(self) -> ExecutorSettings:
        if self.kind == "ray" and not self.address:
            raise ValueError("executor.address: required when executor.kind is ray")
        for kind in self.resources:
            if kind not in ("cpu", "cuda"):
                raise ValueError(f"executor.resources.{kind}: device kinds are cpu and cuda")
        return self


class GrafanaSettings(_Strict):
    """The Grafana showing ``/metrics`` (issue 54 item 7; ``training runs grafana``, F142)."""

    url: str | None = Field(
        None, pattern=r"^https?://", description="Grafana's base URL; null: none (refused)."
    )
    dashboardUid: str = Field("akka-optimize", description="deploy/grafana's dashboard uid.")
    runPanelId: int = Field(6, ge=1, description="Its panel of one run's tokens/s.")


class Pool(_Strict):
    """A pool of devices the scheduler hands out (issue 22; seeds/000 "Capacity and
    waiting"): ``nodes`` machines of one device profile, ``devicesPerNode`` each
    (the profile's when omitted). Runs, evaluations and endpoints claim devices of the
    pool of their device profile."""

    name: str
    deviceProfile: str
    devicesPerNode: int | None = Field(None, ge=1)
    nodes: int = Field(1, ge=1)


class Quotas(_Strict):
    """Devices a project may hold at once, per pool (issue 22): ``projects`` by project
    name, then ``default`` for every other project; a pool named in neither bounds a
    project by the pool's size only."""

    default: dict[str, int] = Field(default_factory=dict)
    projects: dict[str, dict[str, int]] = Field(default_factory=dict)

    def of(self, project: str, pool: str) -> int | None:
        """The quota of ``project`` (a name) in ``pool``, or None when it has none."""
        mine = self.projects.get(project) or {}
        if pool in mine:
            return mine[pool]
        return self.default.get(pool)


class Deployment(_Strict):
    """The parsed deployment file."""

    deviceProfiles: list[DeviceProfile]
    defaultDeviceProfile: str | None = Field(
        None,
        description="Profile for plans that name none; None picks cuda when present, else cpu.",
    )
    pools: list[Pool] | None = Field(
        None,
        description="Device pools; None: one pool per device profile, named after it, of "
        "one node with the profile's devicesPerNode.",
    )
    quotas: Quotas = Field(default_factory=Quotas)
    serving: ServingLimits = Field(default_factory=ServingLimits)
    limits: RegistryLimits = Field(default_factory=RegistryLimits)
    service: ServiceLimits = Field(default_factory=ServiceLimits)
    graders: GraderLimits = Field(default_factory=GraderLimits)
    openaiFineTuning: OpenAIFineTuning = Field(
        default_factory=OpenAIFineTuning,
        description="Rollout settings of reinforcement jobs made through OpenAI's API.",
    )
    jobStorage: JobStorage = Field(default_factory=JobStorage)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    grafana: GrafanaSettings = Field(default_factory=GrafanaSettings)
    memorySettings: MemorySettingsPolicy = Field(
        default_factory=MemorySettingsPolicy,
        description="Allowed execution.memory/rollout settings and values, and defaults.",
    )
    engineSettings: EngineSettingsPolicy = Field(
        default_factory=EngineSettingsPolicy,
        description="Allowed config.engineSettings keys and default overrides "
        "(see akka_optimize/engine_settings.py).",
    )
    catalog: list[dict[str, Any]] | None = Field(
        None, description="Allowed base models; None uses the catalog shipped with the package."
    )
    source: str | None = Field(None, exclude=True)

    def profile(self, name: str) -> DeviceProfile | None:
        """The device profile called ``name`` (case-insensitive), or None."""
        for p in self.deviceProfiles:
            if p.name.lower() == name.lower():
                return p
        return None

    def device_pools(self) -> list[Pool]:
        """The pools, each with ``devicesPerNode`` filled in (the declared ones, or one per
        device profile when ``pools`` is omitted)."""
        if self.pools is None:
            return [
                Pool(name=p.name, deviceProfile=p.name, devicesPerNode=p.devicesPerNode)
                for p in self.deviceProfiles
            ]
        out = []
        for pool in self.pools:
            prof = self.profile(pool.deviceProfile)
            per = pool.devicesPerNode or (prof.devicesPerNode if prof else 1)
            out.append(pool.model_copy(update={"devicesPerNode": per}))
        return out

    @model_validator(mode="after")
    def _pools_known(self) -> Deployment:
        names = [p.name for p in self.device_pools()]
        for i, pool in enumerate(self.pools or []):
            if self.profile(pool.deviceProfile) is None:
                raise ValueError(
                    f"pools.{i}.deviceProfile {pool.deviceProfile!r} is not a declared "
                    "device profile"
                )
        if len(set(names)) != len(names):
            raise ValueError(f"pools: two pools share a name ({', '.join(names)})")
        quoted = [("quotas.default", self.quotas.default)] + [
            (f"quotas.projects.{k}", v) for k, v in self.quotas.projects.items()
        ]
        for where, quota in quoted:
            for pool, n in quota.items():
                if pool not in names:
                    raise ValueError(f"{where}.{pool} names no pool (pools: {', '.join(names)})")
                if n < 0:
                    raise ValueError(f"{where}.{pool} is negative")
        return self


def load_deployment(path: Path | None = None) -> Deployment:
    """Parse the deployment file at ``path`` (the shipped default when None).

    Raises:
        InvalidRequest: the file is not valid YAML or breaks the schema; the
            message names the file and the field.
    """
    p = Path(path) if path else DEFAULT_FILE
    # One stat per call (every request reads service.jsonBodyBytes): a changed, replaced or
    # re-pointed file is parsed again, an unchanged one comes from the cache.
    try:
        st = os.stat(p)
        version: tuple[int, ...] = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        version = ()
    return _load_cached(str(p), version)


@lru_cache(maxsize=16)
def _load_cached(given: str, _version: tuple[int, ...]) -> Deployment:
    path = str(Path(given).resolve())
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidRequest(f"Cannot read the deployment file {path}: {exc}") from exc
    try:
        dep = Deployment.model_validate(raw or {})
    except ValidationError as exc:
        e = exc.errors()[0]
        field = ".".join(str(x) for x in e["loc"])
        raise InvalidRequest(
            f"The deployment file {path} is invalid at {field}: {e['msg']}", field=field
        ) from exc
    dep.source = path
    return dep
