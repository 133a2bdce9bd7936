"""Response schemas of the artifact registry (``/v1/registry``): a version, a name's
summary, the lists, an image push and the registry's info (views in
:mod:`akka_optimize.registry.records` and :mod:`akka_optimize.registry.resolution`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ...deployment import RegistryLimits
from .common import View, iso_time


class StoredFile(View):
    """One blob of a version."""

    digest: str = Field(description="sha256:<64 hex> of the file's bytes.")
    size: int = Field(description="Its size in bytes.")


class VersionView(View):
    """One exact version of a dataset, scoring bundle or model."""

    kind: str = Field(description="dataset, bundle or model.")
    name: str = Field(description="NAMESPACE/NAME.")
    version: str = Field(description="vN.")
    digest: str = Field(description="sha256:<64 hex> over the version's content.")
    ref: str = Field(description="The pinned reference NAMESPACE/NAME:vN@sha256:….")
    size: int = Field(description="Stored bytes of the version's content.")
    aliases: list[str] = Field(description="Aliases pointing at this version.")
    metadata: dict[str, Any] = Field(
        description="Kind-specific facts (rows, bytes, images, prepared counts, rank, "
        "repository, commit, annotations…)."
    )
    source: str | None = Field(description="upload, base (a base model) or adapter.")
    baseModel: str | None = Field(description="The base-model version a model trained on.")
    parentModel: str | None = Field(description="The model a reinforcement run started from.")
    runId: str | None = Field(description="The run that produced a trained model.")
    files: dict[str, StoredFile] = Field(description="Relative path → the file's blob.")
    createdAt: str | None = iso_time("When the version was registered")


class StoredVersion(VersionView):
    """A registration's answer: the version and whether it is new."""

    created: bool = Field(description="False when the content was already stored.")


class NameSummary(View):
    """A named artifact with its latest version and aliases."""

    name: str = Field(description="NAMESPACE/NAME.")
    versions: int = Field(description="Its newest version number.")
    latest: str = Field(description="vN of its newest version.")
    digest: str = Field(description="The newest version's digest.")
    aliases: dict[str, str] = Field(description="Alias → vN.")
    updatedAt: str | None = iso_time("When its newest version was registered")


class NameList(View):
    """Named artifacts of one kind, by name (those the caller sees)."""

    items: list[NameSummary] = Field(description="The names, sorted.")


class VersionPage(View):
    """Versions of one name, oldest first, one page at a time."""

    items: list[VersionView] = Field(description="At most limit versions numbered above after.")
    nextAfter: int | None = Field(description="The after of the next page; null on the last.")


class ImagePush(View):
    """A stored image."""

    digest: str = Field(description="sha256:<64 hex> of its bytes; rows name it so.")
    filename: str = Field(description="The file name given.")
    size: int = Field(description="Its size in bytes.")


class RegistryInfo(View):
    """The registry's build version, artifact kinds and upload limits."""

    version: str = Field(description="The service's build version.")
    kinds: list[str] = Field(description="dataset, bundle, model, image.")
    limits: RegistryLimits = Field(description="The deployment's upload limits.")


class AdapterImportView(View):
    """One ``training adapters import`` (``training adapters get IMPORT_ID``)."""

    id: str = Field(description="The import's ID (commands take an unambiguous prefix).")
    name: str = Field(description="NAMESPACE/NAME the version is registered under.")
    baseModel: str = Field(description="The base model the adapter is checked against.")
    alias: str | None = Field(description="The alias pointed at the version, if asked.")
    state: str = Field(description="CHECKING, REGISTERED or FAILED.")
    stagesDone: int = Field(description="Stages done (unpack, check, register).")
    stagesTotal: int = Field(description="Stages of an import (3).")
    progress: str = Field(description="The stage under way, or the outcome.")
    error: str | None = Field(description="Why it failed; nothing was registered.")
    model: str | None = Field(description="The registered version's pinned reference.")
    checks: dict[str, Any] | None = Field(
        description="What the checks found once REGISTERED: rank, targetModules, adaptedModules."
    )
    createdAt: str = iso_time("When the upload was received")
    finishedAt: str | None = iso_time("When it was registered or failed", required=False)
