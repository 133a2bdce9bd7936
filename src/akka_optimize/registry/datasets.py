"""Datasets and images in the registry (seeds/001 "Datasets live in the registry").

A dataset version holds two blobs:

- ``object``: the bytes that were registered (a JSONL file or a ZIP of JSONL plus images),
  returned by ``registry datasets object``;
- the canonical examples: one canonical JSON object per line (sorted keys, no spaces,
  UTF-8), in file order, after validation and normalisation by
  :func:`akka_optimize.data.jsonl.read_rows`. The version's digest is the
  SHA-256 of these bytes, so registering the same examples again — even written with other
  spacing or key order — returns the existing version.

An example naming a local image by path (a content part ``{"type": "image", "image":
PATH}`` or ``{"type": "image_url", "image_url": {"url": PATH}}``) uploads the image and the
canonical example names it as ``sha256:<hex>``. Paths resolve inside the ZIP only: the
service never reads its own files because a row names them, and answers every refused path
with the same sentence, whether or not a file of that name exists (the CLI packs images
named beside a JSONL file into a ZIP). Limits: ``RegistryLimits.uploadBytes`` (256 MiB by default) on the file,
and on a ZIP's files after extraction (seeds/001 "Other changes").

Memory: a JSONL file is read, checked and written out one row at a time, so a
registration holds one row (plus the list of at most ten bad lines), not the file:
peak memory stays a small fraction of the upload whatever the row count (measured in
``tests/registry/test_registry_memory.py``). A ZIP's files are held in memory while it
registers (at most ``uploadBytes`` after extraction).

This module owns registering and reading dataset versions; blobs and canonical lines live
in :mod:`.blobs`, images in :mod:`.images`, the canonical rows of an upload in
:mod:`.dataset_canonical`, and every name stays importable from here.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..data.prepared.rows import examples_from_canonical
from ..deployment import RegistryLimits
from ..errors import InvalidRequest, TooLarge
from ..refs import parse_ref
from ..store import BlobStore, content_key
from .blobs import canonical_line as canonical_line
from .blobs import mib as mib
from .blobs import store_file as store_file
from .core import ResolvedVersion, check_alias, register_version
from .dataset_canonical import canonical_upload
from .images import dir_uploader as dir_uploader
from .images import local_image_paths as local_image_paths
from .images import push_image as push_image
from .images import rewrite_images as rewrite_images
from .images import zip_uploader as zip_uploader
from .row_view import JsonlRows


def register_dataset(
    session: Session,
    store: BlobStore,
    ref: str,
    path: Path,
    *,
    alias: str | None = None,
    limits: RegistryLimits | None = None,
    project: str | None = None,
    source: str | None = None,
    lineage: dict[str, Any] | None = None,
    origin: str = "upload",
) -> tuple[ResolvedVersion, bool]:
    """Register the examples of a JSONL or ZIP file as a version of dataset ``ref``.

    Args:
        session, store: where versions and blobs go.
        ref: ``NS/NAME`` (a bare NAME resolves in ``project``).
        path: a local JSONL file, or a ZIP holding one JSONL file and its images.
        alias: an alias to point at the version.
        limits: the deployment's registry limits (defaults when None).
        source: the file name used in refusals (default ``path.name``).
        lineage: where the rows came from, kept as ``metadata.curation`` (a curation's
            ID, pinned source and judge: :mod:`akka_optimize.evals.curation.kind`).
        origin: the version's ``source`` column (``upload``, ``curation``).

    Returns:
        ``(version, created)``; ``created`` is False when the same examples were registered.

    Raises:
        TooLarge: the file, or a ZIP's files after extraction, exceed ``uploadBytes``.
        InvalidRequest: bad lines (``line N: …`` for the first ones, from
            :class:`akka_optimize.data.rows.DataFileError`), a missing image, a bad ZIP.
        Nothing is registered when any check fails.
    """
    limits = limits or RegistryLimits()
    target = parse_ref(ref, project)
    if alias:
        check_alias(alias)  # before any blob is stored
    source = source or path.name
    size = path.stat().st_size
    if size > limits.uploadBytes:
        raise TooLarge(
            f"{source} is {mib(size)}; the dataset limit is {mib(limits.uploadBytes)} "
            "(RegistryLimits.uploadBytes).",
            field="file",
        )
    with open(path, "rb") as f:
        is_zip = f.read(4) == b"PK\x03\x04"
    digest, count, nbytes, images, prepared = canonical_upload(
        session, store, path, source, is_zip, limits
    )
    obj_digest, obj_size = store_file(store, path)
    meta = {
        "rows": count,
        "bytes": nbytes,
        "format": "prepared" if prepared else "zip" if is_zip else "jsonl",
        "filename": source,
        "object": {"digest": obj_digest, "size": obj_size},
        "images": sorted(images),
    }
    if prepared:
        meta["prepared"] = prepared
    if lineage:
        meta["curation"] = lineage
    return register_version(
        session,
        "dataset",
        target,
        digest,
        alias=alias,
        size=nbytes,
        files={
            ("prepared.jsonl" if prepared else "examples.jsonl"): {"digest": digest, "size": nbytes}
        },
        metadata_=meta,
        source=origin,
    )


def is_prepared(resolved: ResolvedVersion) -> bool:
    """Whether a dataset version holds prepared token rows, not conversations."""
    return resolved.metadata.get("format") == "prepared"


def load_dataset_rows(
    store: BlobStore, resolved: ResolvedVersion, field: str = "dataset"
) -> list[dict[str, Any]]:
    """The canonical (validated, normalised) examples of a dataset version, in file order.

    ``field`` names the request field that gave the version, in the refusal below.

    Raises:
        NotFound: the version's blob is missing from the store.
        InvalidRequest: the version holds prepared token rows (code ``prepared_rows``),
            which only a supervised run trains (:func:`load_prepared_examples`).
    """
    _refuse_prepared(resolved, field)
    data = store.get_bytes(content_key(resolved.digest.removeprefix("sha256:")))
    return [json.loads(line) for line in data.splitlines() if line]


def _refuse_prepared(resolved: ResolvedVersion, field: str) -> None:
    if is_prepared(resolved):
        raise InvalidRequest(
            f"dataset {resolved.pinned} holds prepared token rows (prepared.json), which only "
            "a supervised run trains; give a dataset of messages rows here",
            field=field,
            code="prepared_rows",
        )


def dataset_rows_view(
    store: BlobStore, resolved: ResolvedVersion, field: str = "dataset"
) -> JsonlRows:
    """The canonical examples of a dataset version as :func:`load_dataset_rows` gives them,
    read in place (:class:`~akka_optimize.registry.row_view.JsonlRows`): the service's dry
    run, data preview and submit checks hold the stored bytes and 8 bytes per row, not every
    row parsed (issue 14 item 3).

    Raises:
        NotFound: the version's blob is missing from the store.
        InvalidRequest: the version holds prepared token rows (code ``prepared_rows``).
    """
    _refuse_prepared(resolved, field)
    return JsonlRows(store.get_bytes(content_key(resolved.digest.removeprefix("sha256:"))))


def load_prepared_examples(
    store: BlobStore, resolved: ResolvedVersion
) -> tuple[dict[str, Any], list]:
    """The header and :class:`~akka_optimize.data.types.Example` list of a prepared dataset
    version (:func:`akka_optimize.data.prepared.rows.examples_from_canonical`).

    Raises:
        NotFound: the version's blob is missing from the store.
    """

    data = store.get_bytes(content_key(resolved.digest.removeprefix("sha256:")))
    return examples_from_canonical(data)


def open_object(store: BlobStore, resolved: ResolvedVersion):
    """Open the registered bytes (``registry datasets object``) for reading."""
    obj = resolved.metadata.get("object") or {"digest": resolved.digest}
    return store.open(content_key(obj["digest"].removeprefix("sha256:")))


def media_type_of(name: str) -> str:
    """A media type guess for a file name."""
    return mimetypes.guess_type(name)[0] or "application/octet-stream"
