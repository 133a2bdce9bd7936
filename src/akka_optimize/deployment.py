"""The deployment file: what this installation allows and can do.

One YAML file (``$AKKA_OPTIMIZE_DEPLOYMENT``, else ``$AKKA_OPTIMIZE_HOME/deployment.yaml``,
else the default shipped beside this module, ``deployment.yaml``) declares device
profiles, serving limits, registry limits, which memory and engine settings a
plan may state, and the base-model catalog. Ceilings in plan refusals come from
here and from the base model's catalog entry (DESIGN.md "One picture").

Sections are owned by the package that reads them: ``deviceProfiles``,
``memorySettings`` and ``engineSettings`` by :mod:`akka_optimize.plan`; ``serving`` by
:mod:`akka_optimize.serving`; ``limits`` by :mod:`akka_optimize.registry`; ``catalog``
by :mod:`akka_optimize.catalog`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidRequest

DEFAULT_FILE = Path(__file__).with_name("deployment.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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
    reservedDevices: int = Field(0, ge=0)
    deviceProfile: str | None = None


class RegistryLimits(_Strict):
    """Upload limits (seeds/001 "Other changes")."""

    uploadBytes: int = 256 * 1024**2
    bundleCompressedBytes: int = 256 * 1024**2
    bundleExpandedBytes: int = 2 * 1024**3
    bundleFiles: int = 10_000


class Deployment(_Strict):
    """The parsed deployment file."""

    deviceProfiles: list[DeviceProfile]
    defaultDeviceProfile: str | None = Field(
        None,
        description="Profile for plans that name none; None picks cuda when present, else cpu.",
    )
    serving: ServingLimits = Field(default_factory=ServingLimits)
    limits: RegistryLimits = Field(default_factory=RegistryLimits)
    memorySettings: dict[str, Any] = Field(
        default_factory=dict, description="Allowed execution.memory/rollout settings and values."
    )
    engineSettings: dict[str, Any] = Field(
        default_factory=dict,
        description="Allowed config.engineSettings keys (see plan.engine_settings).",
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


def load_deployment(path: Path | None = None) -> Deployment:
    """Parse the deployment file at ``path`` (the shipped default when None).

    Raises:
        InvalidRequest: the file is not valid YAML or breaks the schema; the
            message names the file and the field.
    """
    p = Path(path) if path else DEFAULT_FILE
    return _load_cached(str(p.resolve()), p.stat().st_mtime_ns if p.exists() else 0)


@lru_cache(maxsize=16)
def _load_cached(path: str, _mtime: int) -> Deployment:
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
