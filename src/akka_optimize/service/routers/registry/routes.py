"""Routes of the artifact registry under ``/v1/registry`` (seeds/001 "Dataset routes",
"Bundle routes", "Model routes": "use … the registry's routes under /v1/registry").

Uploads are streamed (``request.stream()``) into a spool file under
``$AKKA_OPTIMIZE_HOME/uploads`` with the deployment's size limit applied while receiving
(413 naming the limit), then registered from that file: blobs first, the version row
last. A service killed mid-upload leaves only a spool file, which start-up removes; no
blob and no version. ``{name}`` in these paths may carry a selector: ``train:v2``,
``train:candidate``, ``train@sha256:…``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from .... import __version__
from ....catalog.cache import ready_model_dir
from ....core import uploads
from ....core.access import rules as access
from ....core.context import ServiceContext
from ....engine.merge import merge_adapter
from ....errors import InvalidRequest, NotFound
from ....plan.schema.base import RequestModel
from ....refs import validate_name
from ....registry import (
    annotate,
    download_model_files,
    list_names,
    list_versions,
    open_object,
    push_image,
    register_bundle,
    register_dataset,
    set_alias,
)
from ....registry.aliases import VERSION_PATTERN
from ....registry.core import check_alias
from ....store import content_key
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import (
    ImagePush,
    NameList,
    RegistryInfo,
    StoredVersion,
    VersionPage,
    VersionView,
    answers,
    binary,
)
from . import transfer

router = APIRouter(route_class=JsonRoute, prefix="/v1/registry", tags=["registry"])
PLURAL = {"datasets": "dataset", "bundles": "bundle", "models": "model"}
#: A registration's answers: 201 for a new version, 200 for content already stored.
_STORED = answers(
    StoredVersion,
    200,
    "The content was already stored: its existing version (created false).",
    also={201: (StoredVersion, "A new version (created true).")},
)


def on_startup(ctx: ServiceContext) -> None:
    """Remove spool files of uploads that a previous process did not finish."""
    shutil.rmtree(uploads.uploads_dir(ctx), ignore_errors=True)
    uploads.uploads_dir(ctx).mkdir(parents=True, exist_ok=True)


def _kind(kinds: str) -> str:
    if kinds not in PLURAL:
        raise NotFound(f"No registry collection {kinds!r}; use datasets, bundles or models.")
    return PLURAL[kinds]


def _answer(rv: Any, created: bool) -> JSONResponse:
    return JSONResponse({**rv.to_dict(), "created": created}, status_code=201 if created else 200)


@router.get("/info", response_model=RegistryInfo)
def registry_info(ctx: CtxDep) -> dict[str, Any]:
    """The registry's build version, artifact kinds and upload limits (seeds/001)."""
    return {
        "version": __version__,
        "kinds": ["dataset", "bundle", "model", "image"],
        "limits": uploads.registry_limits(ctx).model_dump(),
    }


@router.post("/datasets/{namespace}/{name}", **_STORED)
async def register_dataset_route(
    namespace: str,
    name: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    alias: str | None = None,
    filename: str = "upload.jsonl",
) -> JSONResponse:
    """Register the streamed body (JSONL, a ZIP of JSONL plus images, or a ZIP of prepared
    token rows: prepared.json and its Parquet files) as a dataset version.
    Its images then belong to the namespace's project (:func:`..access.can_read_image`)."""
    limits = uploads.registry_limits(ctx)
    ref = f"{namespace}/{name}"
    validate_name(namespace, "namespace")
    access.check_namespace_write(principal, namespace, "datasets.register")
    if alias:
        check_alias(alias)
    path = await transfer.spool_body(
        request, ctx, limits.uploadBytes, "dataset upload", "uploadBytes"
    )

    def work() -> tuple[Any, bool]:
        with ctx.db.session() as s:
            rv, created = register_dataset(
                s, ctx.store, ref, path, alias=alias, limits=limits, source=Path(filename).name
            )
            access.record_images(s, rv.namespace, list(rv.metadata.get("images") or []))
            return rv, created

    return _answer(*await transfer.with_upload(path, work))


@router.post("/bundles/{namespace}/{name}", **_STORED)
async def register_bundle_route(
    namespace: str,
    name: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    alias: str | None = None,
) -> JSONResponse:
    """Register the streamed body (a tar or tar.gz of the bundle folder) as a bundle version."""
    access.check_namespace_write(principal, namespace, "bundles.register")
    if alias:
        check_alias(alias)
    limits = uploads.registry_limits(ctx)
    path = await transfer.spool_body(
        request, ctx, limits.bundleCompressedBytes, "bundle archive", "bundleCompressedBytes"
    )

    def work() -> tuple[Any, bool]:
        with ctx.db.session() as s:
            return register_bundle(
                s, ctx.store, f"{namespace}/{name}", path, alias=alias, limits=limits
            )

    return _answer(*await transfer.with_upload(path, work))


@router.post("/models/{namespace}/{name}", **_STORED)
async def register_model_route(
    namespace: str,
    name: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    base_model: str,
    alias: str | None = None,
    run_id: str | None = None,
    parent_model: str | None = None,
) -> JSONResponse:
    """Register the streamed body (a tar of a PEFT adapter folder) as a model version."""
    access.check_namespace_write(principal, namespace, "models.register")
    if alias:
        check_alias(alias)
    limits = uploads.registry_limits(ctx)
    path = await transfer.spool_body(
        request, ctx, limits.bundleCompressedBytes, "model archive", "bundleCompressedBytes"
    )

    def work() -> Any:
        with tempfile.TemporaryDirectory(dir=uploads.uploads_dir(ctx)) as tmp:
            uploads.extract_tar(path, Path(tmp), limits)
            with ctx.db.session() as s:
                checked = uploads.check_upload(ctx, s, Path(tmp), base_model)
                return uploads.register_checked_adapter(
                    ctx, s, Path(tmp), namespace, name, base_model=base_model,
                    metadata={"registeredBy": "upload", **checked}, run_id=run_id,
                    parent_model=parent_model, alias=alias,
                )  # fmt: skip

    return _answer(*await transfer.with_upload(path, work))


@router.post("/images", status_code=201, **answers(ImagePush, 201, "The stored image."))
async def push_image_route(
    request: Request, ctx: CtxDep, principal: PrincipalDep, filename: str
) -> JSONResponse:
    """Store one streamed image (``registry images push``); answers its ``sha256:`` digest.
    A project token's push makes the image its project's."""
    limits = uploads.registry_limits(ctx)
    path = await transfer.spool_body(request, ctx, limits.uploadBytes, "image", "uploadBytes")

    def work() -> dict[str, Any]:
        with ctx.db.session() as s:
            digest = push_image(s, ctx.store, path, filename=Path(filename).name)
            access.record_images(s, access.scope(principal), [digest])
            return {"digest": digest, "filename": Path(filename).name, "size": path.stat().st_size}

    return JSONResponse(await transfer.with_upload(path, work), status_code=201)


@router.get("/images/{digest}", **binary("The image's bytes.", "application/octet-stream"))
def get_image(digest: str, ctx: CtxDep, principal: PrincipalDep) -> StreamingResponse:
    """The bytes of a registered image (pushed, or part of a dataset): only an image, never
    another blob, and for a project token only an image of its project."""
    hexd = digest.lower().removeprefix("sha256:")
    key = content_key(hexd) if len(hexd) == 64 else ""
    with ctx.db.session() as s:
        readable = bool(key) and access.can_read_image(principal, s, f"sha256:{hexd}")
    if not readable or not ctx.store.exists(key):
        raise NotFound(f"Image {digest} is not in the registry.", field="digest")
    return transfer.stream_file(ctx.store.open(key), "application/octet-stream")


@router.get("/{kinds}", **answers(NameList))
def list_route(
    kinds: str, ctx: CtxDep, principal: PrincipalDep, namespace: str | None = None
) -> dict[str, Any]:
    """Named artifacts of one kind the caller sees, with latest version and aliases."""
    kind = _kind(kinds)
    with ctx.db.session() as s:
        return {"items": access.filter_names(principal, s, kind, list_names(s, kind, namespace))}


@router.get("/{kinds}/{namespace}/{name}", **answers(VersionView))
def get_route(
    kinds: str,
    namespace: str,
    name: str,
    ctx: CtxDep,
    principal: PrincipalDep,
    project: str | None = None,
) -> dict[str, Any]:
    """One version, by any reference (``NS/NAME``, ``:vN``, ``:ALIAS``, ``@sha256:…``)."""
    with ctx.db.session() as s:
        return access.resolve(principal, s, _kind(kinds), f"{namespace}/{name}", project).to_dict()


MAX_PAGE = 1000


@router.get("/{kinds}/{namespace}/{name}/versions", **answers(VersionPage))
def versions_route(
    kinds: str,
    namespace: str,
    name: str,
    ctx: CtxDep,
    principal: PrincipalDep,
    limit: int = Query(MAX_PAGE, ge=1, le=MAX_PAGE),
    after: int = Query(0, ge=0, le=2**62),
) -> dict[str, Any]:
    """Versions of a named artifact, oldest first, a page at a time: at most ``limit``
    (1000) numbered above ``after``; ``nextAfter`` is the ``after`` of the next page, or
    null on the last one."""
    ns = validate_name(namespace, "ref")
    nm = validate_name(name, "ref")
    with ctx.db.session() as s:
        access.check_visible_ref(principal, s, _kind(kinds), f"{ns}/{nm}")
        page = list_versions(s, _kind(kinds), ns, nm, limit=limit + 1, after=after)
    more = len(page) > limit
    page = page[:limit]
    return {
        "items": [v.to_dict() for v in page],
        "nextAfter": page[-1].version if more else None,
    }


@router.get(
    "/datasets/{namespace}/{name}/object",
    **binary(
        "The registered bytes: JSONL, or a ZIP (rows with images, or prepared token rows).",
        "application/x-ndjson",
        "application/zip",
    ),
)
def dataset_object(
    namespace: str, name: str, ctx: CtxDep, principal: PrincipalDep
) -> StreamingResponse:
    """The bytes that were registered for a dataset version."""
    with ctx.db.session() as s:
        rv = access.resolve(principal, s, "dataset", f"{namespace}/{name}")
    zipped = rv.metadata.get("format") in ("zip", "prepared")
    media = "application/zip" if zipped else "application/x-ndjson"
    resp = transfer.stream_file(open_object(ctx.store, rv), media)
    resp.headers["X-Akka-Ref"] = rv.pinned
    return resp


@router.get(
    "/models/{namespace}/{name}/object", **binary("The adapter, a tar.", "application/x-tar")
)
def model_object(
    namespace: str, name: str, ctx: CtxDep, principal: PrincipalDep
) -> StreamingResponse:
    """A trained or imported model version's files as a tar of its PEFT adapter folder
    (``adapter_config.json``, ``adapter_model.safetensors``…), as registered; a base-model
    version has no files here (400 naming the weights cache)."""

    with ctx.db.session() as s:
        rv = access.resolve(principal, s, "model", f"{namespace}/{name}")
    tmp = Path(tempfile.mkdtemp(dir=uploads.uploads_dir(ctx)))
    try:
        folder = download_model_files(ctx.store, rv, tmp / "adapter")
        f = transfer.tar_of(folder, tmp / "adapter.tar")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    resp = transfer.stream_file(f, "application/x-tar")
    resp.headers["X-Akka-Ref"] = rv.pinned
    return resp


@router.get(
    "/models/{namespace}/{name}/merged",
    **binary("A tar of the merged transformers folder.", "application/x-tar"),
)
def model_merged(
    namespace: str, name: str, ctx: CtxDep, principal: PrincipalDep
) -> StreamingResponse:
    """The version's adapter merged into its base model (fp32 arithmetic, saved in the base
    model's dtype), as a tar of a transformers folder (:mod:`akka_optimize.engine.merge`).
    Needs the base model's weights cached here (selected and READY)."""

    with ctx.db.session() as s:
        rv = access.resolve(principal, s, "model", f"{namespace}/{name}")
        if rv.source != "adapter" or not rv.base_model:
            raise InvalidRequest(
                f"{rv.pinned} is not an adapter; only adapters merge.", field="ref"
            )
        base_dir, _ = ready_model_dir(s, ctx.settings, rv.base_model)
    tmp = Path(tempfile.mkdtemp(dir=uploads.uploads_dir(ctx)))
    try:
        adapter = download_model_files(ctx.store, rv, tmp / "adapter")
        folder = merge_adapter(base_dir, adapter, tmp / "merged")
        f = transfer.tar_of(folder, tmp / "merged.tar")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    resp = transfer.stream_file(f, "application/x-tar")
    resp.headers["X-Akka-Ref"] = rv.pinned
    return resp


class AliasBody(RequestModel):
    """Body of ``PUT …/aliases/{alias}``."""

    version: str = Field(  # the pattern is documented only: parse_version refuses
        description="The version the alias points at, such as v3.",
        json_schema_extra={"pattern": VERSION_PATTERN},
    )


@router.put("/{kinds}/{namespace}/{name}/aliases/{alias}", **answers(VersionView))
def alias_route(
    kinds: str,
    namespace: str,
    name: str,
    alias: str,
    body: AliasBody,
    ctx: CtxDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Point an alias (``candidate``, ``champion``, …) at a version."""
    kind = _kind(kinds)
    access.check_namespace_write(principal, namespace, "aliases.set")
    with ctx.db.session() as s:
        return set_alias(s, kind, namespace, name, alias, body.version).to_dict()


class AnnotationsBody(RequestModel):
    """Body of ``PUT …/annotations``: keys to set (a null value removes a key)."""

    annotations: dict[str, Any]


@router.put("/{kinds}/{namespace}/{name}/annotations", **answers(VersionView))
def annotate_route(
    kinds: str,
    namespace: str,
    name: str,
    body: AnnotationsBody,
    ctx: CtxDep,
    principal: PrincipalDep,
) -> dict[str, Any]:
    """Merge annotations into one version's metadata."""
    kind = _kind(kinds)
    access.check_namespace_write(principal, namespace, "annotations.set")
    with ctx.db.session() as s:
        return annotate(
            s,
            kind,
            f"{namespace}/{name}",
            body.annotations,
            limit=uploads.registry_limits(ctx).annotationBytes,
        ).to_dict()
