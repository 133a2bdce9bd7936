"""OpenAI's Files API for fine-tuning (issue 51 item 1): ``POST /v1/files`` (multipart
``file`` and ``purpose: fine-tune``), ``GET /v1/files``, ``GET /v1/files/{file_id}``,
``GET /v1/files/{file_id}/content`` and ``DELETE /v1/files/{file_id}``. A file is a
version of the dataset ``PROJECT/openai-files`` (:mod:`akka_optimize.core.openai_ft.files`).
"""

from __future__ import annotations

from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ....core.openai_ft import file_store
from ....core.openai_ft.acting import acting_project
from ....core.openai_ft.errors import OpenAIError
from ....core.uploads import registry_limits
from ....errors import AkkaError
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import answers, binary
from ...schemas.openai_ft import OpenAIFile, OpenAIFileDeleted, OpenAIFileList
from .common import call, error_response, in_session, visible

router = APIRouter(route_class=JsonRoute, prefix="/v1/files", tags=["openai"])


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, Any]]:
    """``(form fields, {name: (filename, bytes)})`` of a ``multipart/form-data`` body
    (parsed with the standard library's MIME parser).

    Raises:
        OpenAIError: not multipart, or no ``file`` part (param ``file``).
    """
    if not content_type.lower().startswith("multipart/form-data"):
        raise OpenAIError("Send the file as multipart/form-data with a file part.", "file")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    msg = BytesParser(policy=HTTP).parsebytes(head + body)
    fields: dict[str, str] = {}
    files: dict[str, Any] = {}
    for part in msg.iter_parts() if msg.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is not None:
            files[str(name)] = (filename, data)
        elif name:
            fields[str(name)] = data.decode("utf-8", "replace")
    return fields, files


@router.post("", **answers(OpenAIFile, 200, "The file, registered."))
async def create_file(request: Request, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    """Upload a JSONL file of OpenAI rows (chat supervised, reinforcement or preference).

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """
    limits = registry_limits(ctx)
    cap = limits.uploadBytes + 65536  # the file plus the form's own parts
    too_large = OpenAIError(
        f"The file is larger than the upload limit of {limits.uploadBytes:,} bytes "
        "(RegistryLimits.uploadBytes).",
        "file",
        "file_too_large",
        413,
    )
    if int(request.headers.get("content-length") or 0) > cap:
        return error_response(too_large)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return error_response(too_large)
        chunks.append(chunk)
    body = b"".join(chunks)
    try:
        fields, files = parse_multipart(request.headers.get("content-type", ""), body)
        if "file" not in files:
            raise OpenAIError("The upload has no file part.", "file", "missing_required_parameter")
    except OpenAIError as exc:
        return error_response(exc)
    filename, data = files["file"]

    def work(s: Any) -> dict[str, Any]:
        project = acting_project(s, principal, visible(principal, request))
        return file_store.register_file(
            s, ctx.store, project, filename, fields.get("purpose", ""), data, limits
        )

    return await in_session(ctx, work)


@router.get("", **answers(OpenAIFileList))
async def list_files(
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    purpose: str | None = None,
    after: str | None = None,
    limit: int = 10000,
    order: str = "desc",
) -> JSONResponse:
    """The caller's files (``purpose``, ``after``, ``limit``, ``order`` as OpenAI takes them)."""
    project = visible(principal, request)
    limit = max(1, min(limit, 10000))
    return await in_session(
        ctx, lambda s: file_store.list_files(s, project, purpose, after, limit, order)
    )


@router.get("/{file_id}", **answers(OpenAIFile))
async def get_file(
    file_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """One file."""
    project = visible(principal, request)
    return await in_session(ctx, lambda s: file_store.get_file(s, file_id, project))


@router.get("/{file_id}/content", **binary("The file as uploaded.", "application/octet-stream"))
async def file_content(
    file_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> Response:
    """The file's bytes, as uploaded."""
    project = visible(principal, request)
    try:
        data = await call(ctx, lambda s: file_store.file_bytes(s, ctx.store, file_id, project))
    except (OpenAIError, AkkaError) as exc:
        return error_response(exc)
    return Response(data, media_type="application/octet-stream")


@router.delete("/{file_id}", **answers(OpenAIFileDeleted))
async def delete_file(
    file_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Delete a file: it is no longer listed; its dataset version stays for the runs that
    pinned it (:mod:`akka_optimize.core.openai_ft.file_store`)."""
    project = visible(principal, request)
    return await in_session(ctx, lambda s: file_store.delete_file(s, file_id, project))
