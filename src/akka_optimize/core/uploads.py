"""An uploaded adapter or archive on its way into the registry: where uploads
spool, the registry's limits, unpacking an archive within them, and checking an adapter
against its base model's cached weights (F118). The upload routes and adapter imports
(:mod:`akka_optimize.core.adapter_imports`) call the same functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..catalog.cache import ready_model_dir
from ..deployment import RegistryLimits
from ..errors import AkkaError, InvalidRequest, NotFound
from ..jobs.kinds import model_registered
from ..registry import list_versions, register_adapter
from ..registry.adapter_checks import check_adapter
from ..registry.archives import open_tar
from ..registry.bundles import scan_tar
from ..registry.records import ResolvedVersion
from .context import ServiceContext


def uploads_dir(ctx: ServiceContext) -> Path:
    """The folder request bodies spool to before they are checked (``HOME/uploads``)."""
    return ctx.settings.home / "uploads"


def registry_limits(ctx: ServiceContext) -> RegistryLimits:
    """The deployment file's registry limits (sizes in bytes, counts of members)."""
    return ctx.deployment().limits


def base_dir_for(ctx: ServiceContext, s: Any, base_model: str) -> Path:
    """The cached weights folder an adapter of ``base_model`` is checked against.

    Raises:
        InvalidRequest: (field ``baseModel``) the base model is not selected and cached
            here; the sentence names the select command.
    """

    try:
        return ready_model_dir(s, ctx.settings, base_model)[0]
    except AkkaError as exc:
        raise InvalidRequest(
            f"The adapter cannot be checked against base model {base_model}: {exc.message}",
            field="baseModel",
            code=exc.code,
        ) from exc


def check_upload(ctx: ServiceContext, s: Any, folder: Path, base_model: str) -> dict[str, Any]:
    """Check an uploaded PEFT adapter against its base model's cached weights (F118,
    :func:`akka_optimize.registry.adapter_checks.check_adapter`); returns its summary.

    Raises:
        InvalidRequest: the adapter breaks a rule, or the base model's weights are not
            cached here, so the adapter cannot be checked (the sentence names the select
            command).
    """

    base_dir = base_dir_for(ctx, s, base_model)
    max_rank = ctx.deployment().serving.maxLoraRank
    return check_adapter(folder, base_dir, max_rank=max_rank)


def safe_versions(s: Any, namespace: str, name: str) -> list[Any]:
    """The model versions of ``namespace/name`` (any case), or none where it does not exist."""
    try:
        return list_versions(s, "model", namespace.lower(), name.lower())
    except NotFound:
        return []


def extract_tar(path: Path, dest: Path, limits: RegistryLimits) -> None:
    """Unpack the model archive at ``path`` into ``dest`` within ``limits``.

    Raises:
        InvalidRequest / TooLarge: (from the registry's archive checks) the archive is not
            a tar, holds a link or a path outside ``dest``, or passes a limit.
    """
    with open_tar(path, limits, "model archive") as tf:
        members = scan_tar(tf, limits)
        tf.extractall(dest, members=members, filter="data")


def register_checked_adapter(
    ctx: ServiceContext,
    s: Any,
    folder: Path,
    namespace: str,
    name: str,
    *,
    base_model: str,
    metadata: dict[str, Any],
    run_id: str | None = None,
    parent_model: str | None = None,
    alias: str | None = None,
) -> tuple[ResolvedVersion, bool]:
    """Register the adapter in ``folder`` (already passed :func:`check_upload`) as a version
    of model ``namespace/name``; returns the version and whether it is new. The same files
    again answer their existing version, and only a new version is announced to the
    model-registered listeners (a project's evaluation settings queue its evaluation).
    Uploads (``POST /v1/registry/models/…``) and adapter imports both register here.

    Raises:
        InvalidRequest: (from :func:`akka_optimize.registry.register_adapter`) a bad name,
            alias or parent reference.
    """
    before = {v.digest for v in safe_versions(s, namespace, name)}
    rv = register_adapter(
        s, ctx.store, namespace, name, folder, base_model=base_model, run_id=run_id,
        metadata=metadata, parent_model=parent_model, alias=alias,
    )  # fmt: skip
    created = rv.digest not in before
    if created:
        model_registered(ctx, s, namespace.strip().lower(), rv)
    return rv, created
