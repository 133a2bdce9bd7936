"""Uploading, listing, reading and deleting OpenAI files in the registry (:mod:`.files`
gives the mapping; this module reads and writes the state store and the blob store).

A deleted file is hidden (its annotation says ``deleted``), not removed: a dataset version
is immutable and a run that pinned it keeps it (seeds/001 "the run records the exact
version"). Uploading the same bytes again answers the same file, undeleted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.registry import RegistryName, RegistryVersion
from ...errors import AkkaError, NotFound
from ...registry.blobs import store_bytes
from ...registry.core import annotate
from ...registry.datasets import register_dataset
from ...store import BlobStore, content_key
from .errors import OpenAIError, from_platform
from .files import ANNOTATION, DATASET, PURPOSES, convert_file, file_object, parse_file_id


def _epoch(v: Any) -> int:
    return int(v.created_at.timestamp()) if v.created_at else 0


def register_file(
    session: Session,
    store: BlobStore,
    project: str,
    filename: str,
    purpose: str,
    data: bytes,
    limits: Any = None,
) -> dict[str, Any]:
    """Register an upload as a version of ``PROJECT/openai-files``; returns its
    ``FileObject`` (:func:`.files.file_object`).

    Raises:
        OpenAIError: a purpose other than ``fine-tune`` (param ``purpose``), a bad line
            (``invalid_file_format``, param ``file``), or the registry's refusal (the
            upload limit: 413).
    """
    import json

    if purpose not in PURPOSES:
        raise OpenAIError(
            f"purpose {purpose!r} is not served here; this service takes files for "
            f"{', '.join(PURPOSES)}.",
            "purpose",
        )
    kind, rows = convert_file(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
        try:
            rv, _ = register_dataset(
                session, store, f"{project}/{DATASET}", path, limits=limits, source=filename
            )
        except AkkaError as exc:
            raise from_platform(exc, {"file": "file"}) from None
    digest = store_bytes(store, data)
    note = {
        "purpose": purpose,
        "filename": filename,
        "bytes": len(data),
        "kind": kind,
        "object": digest,
        "deleted": False,
    }
    annotate(session, "dataset", rv.pinned, {ANNOTATION: note})
    return file_object(project, rv.version, note, _epoch(rv))


def _version(session: Session, project: str, version: int) -> RegistryVersion | None:
    return session.scalar(
        select(RegistryVersion)
        .join(RegistryName, RegistryName.id == RegistryVersion.name_id)
        .where(
            RegistryName.kind == "dataset",
            RegistryName.namespace == project,
            RegistryName.name == DATASET,
            RegistryVersion.version == version,
        )
    )


def find_file(
    session: Session, fid: Any, visible: str | None, param: str = "file_id"
) -> tuple[RegistryVersion, dict[str, Any]]:
    """The version and annotation of file ``fid``, among the files of project ``visible``
    (None: every project).

    Raises:
        OpenAIError: 404 ``file_not_found``: a malformed ID, another project's file, a
            deleted one or none.
    """
    project, version = parse_file_id(fid, param)
    row = None if visible not in (None, project) else _version(session, project, version)
    note = ((row.metadata_ or {}).get("annotations") or {}).get(ANNOTATION) if row else None
    if row is None or not note or note.get("deleted"):
        raise OpenAIError(f"No such File object: {fid}", param, "file_not_found", 404)
    return row, note


def pinned_of(session: Session, fid: Any, visible: str | None, param: str) -> tuple[str, str]:
    """``(pinned dataset reference, kind)`` of a file, for a job's plan (raises as
    :func:`find_file`, naming ``param``)."""
    row, note = find_file(session, fid, visible, param)
    project, version = parse_file_id(fid, param)
    return f"{project}/{DATASET}:v{version}@{row.digest}", note["kind"]


def get_file(session: Session, fid: str, visible: str | None) -> dict[str, Any]:
    """The ``FileObject`` of ``fid`` (raises as :func:`find_file`)."""
    row, note = find_file(session, fid, visible)
    project, version = parse_file_id(fid)
    return file_object(project, version, note, int(row.created_at.timestamp()))


def file_bytes(session: Session, store: BlobStore, fid: str, visible: str | None) -> bytes:
    """The bytes of ``fid`` as uploaded."""

    _, note = find_file(session, fid, visible)
    try:
        return store.get_bytes(content_key(note["object"].removeprefix("sha256:")))
    except NotFound:
        raise OpenAIError(
            f"File {fid}'s bytes are gone from the blob store.", "file_id", "file_not_found", 404
        ) from None


def delete_file(session: Session, fid: str, visible: str | None) -> dict[str, Any]:
    """Hide ``fid`` (module docstring); answers OpenAI's ``FileDeleted``."""
    row, note = find_file(session, fid, visible)
    meta = dict(row.metadata_ or {})
    notes = dict(meta.get("annotations") or {})
    notes[ANNOTATION] = {**note, "deleted": True}
    row.metadata_ = {**meta, "annotations": notes}
    session.flush()
    return {"id": fid, "object": "file", "deleted": True}


def list_files(
    session: Session,
    visible: str | None,
    purpose: str | None,
    after: str | None,
    limit: int,
    order: str,
) -> dict[str, Any]:
    """A page of files (OpenAI's cursor list: ``{"object": "list", "data", "first_id",
    "last_id", "has_more"}``), newest first unless ``order`` is ``asc``."""
    q = (
        select(RegistryName.namespace, RegistryVersion)
        .join(RegistryName, RegistryName.id == RegistryVersion.name_id)
        .where(RegistryName.kind == "dataset", RegistryName.name == DATASET)
    )
    if visible is not None:
        q = q.where(RegistryName.namespace == visible)
    out = []
    for project, row in session.execute(q).all():
        note = ((row.metadata_ or {}).get("annotations") or {}).get(ANNOTATION)
        if note and not note.get("deleted") and (purpose is None or note["purpose"] == purpose):
            out.append(file_object(project, row.version, note, int(row.created_at.timestamp())))
    out.sort(key=lambda f: (f["created_at"], f["id"]), reverse=order != "asc")
    return page(out, after, limit)


def page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's cursor page of ``items`` after the one with ID ``after``."""
    ids = [i["id"] for i in items]
    start = ids.index(after) + 1 if after in ids else 0
    data = items[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + limit < len(items),
    }
