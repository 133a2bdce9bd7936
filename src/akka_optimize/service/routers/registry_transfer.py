"""Bytes in and out of the registry routes (:mod:`.registry`): the spool file a streamed
upload lands in with the deployment's size limit applied while receiving, an uploaded
adapter archive's extraction and checks, and streamed answers (a blob, a tar of a
folder)."""

from __future__ import annotations

import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from ...catalog.cache import ready_model_dir
from ...core.context import ServiceContext
from ...deployment import RegistryLimits
from ...errors import AkkaError, InvalidRequest, NotFound, TooLarge
from ...registry import list_versions
from ...registry.adapter_checks import check_adapter
from ...registry.archives import open_tar
from ...registry.bundles import scan_tar
from ...registry.datasets import mib
from ...store import CHUNK


def uploads_dir(ctx: ServiceContext) -> Path:
    return ctx.settings.home / "uploads"


def registry_limits(ctx: ServiceContext) -> RegistryLimits:
    return ctx.deployment().limits


def _too_large(what: str, limit: int, attr: str) -> TooLarge:
    return TooLarge(
        f"The {what} is larger than the limit of {mib(limit)} (RegistryLimits.{attr}).",
        field="file",
    )


async def spool_body(
    request: Request, ctx: ServiceContext, limit: int, what: str, attr: str
) -> Path:
    """Stream the request body into a spool file, refusing past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(what, limit, attr)
    uploads_dir(ctx).mkdir(parents=True, exist_ok=True)
    path = uploads_dir(ctx) / f"{uuid.uuid4().hex}.part"
    size = 0
    try:
        with open(path, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(what, limit, attr)
                f.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise InvalidRequest(f"The {what} is empty.", field="file")
    return path


async def with_upload(path: Path, fn: Callable[[], Any]) -> Any:
    try:
        return await run_in_threadpool(fn)
    finally:
        path.unlink(missing_ok=True)


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


def safe_versions(s: Any, namespace: str, name: str) -> list[Any]:
    try:
        return list_versions(s, "model", namespace.lower(), name.lower())
    except NotFound:
        return []


def extract_tar(path: Path, dest: Path, limits: RegistryLimits) -> None:

    with open_tar(path, limits, "model archive") as tf:
        members = scan_tar(tf, limits)
        tf.extractall(dest, members=members, filter="data")


def stream_file(f: Any, media: str) -> StreamingResponse:
    def gen() -> Any:
        with f:
            while chunk := f.read(CHUNK):
                yield chunk

    return StreamingResponse(gen(), media_type=media)


def tar_of(folder: Path, archive: Path) -> Any:
    """Write ``folder``'s files to an uncompressed tar and return it open for reading (the
    open handle keeps the bytes once the folder holding it is removed)."""
    with tarfile.open(archive, "w") as tf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tf.add(p, arcname=p.relative_to(folder).as_posix())
    return archive.open("rb")
