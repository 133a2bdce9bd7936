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

from ....core.context import ServiceContext
from ....core.uploads import uploads_dir
from ....errors import InvalidRequest, TooLarge
from ....registry.datasets import mib
from ....store import CHUNK


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
