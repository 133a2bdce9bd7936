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
"""

from __future__ import annotations

import hashlib
import io
import json
import mimetypes
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy.orm import Session

from ..data.prepared import DESCRIPTOR
from ..db.models.registry import RegistryImage
from ..deployment import RegistryLimits
from ..errors import InvalidRequest, TooLarge
from ..refs import parse_ref
from ..store import CHUNK, BlobStore, content_key
from .core import ResolvedVersion, check_alias, register_version

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp", ".bmp": "image/bmp"}  # fmt: skip
_REMOTE = ("http://", "https://", "data:", "sha256:")
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def mib(n: int) -> str:
    """``n`` bytes as a short MiB/GiB phrase for limit sentences."""
    if n >= 1024**3 and n % 1024**3 == 0:
        return f"{n // 1024**3} GiB"
    if n < 1024**2:
        return f"{n:,} bytes"
    return f"{n / 1024**2:g} MiB"


def canonical_line(row: dict[str, Any]) -> bytes:
    """One canonical example: JSON with sorted keys, no spaces, UTF-8, and a newline."""
    return (_CANONICAL.encode(row) + "\n").encode()


def _file_digest(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def store_file(store: BlobStore, path: Path) -> tuple[str, int]:
    """Store a local file as a content-addressed blob. Returns ``(sha256:<hex>, size)``."""
    hexd, size = _file_digest(path)
    if not store.exists(content_key(hexd)):
        store.put_file(content_key(hexd), path)
    return f"sha256:{hexd}", size


def store_bytes(store: BlobStore, data: bytes) -> str:
    """Store bytes as a content-addressed blob. Returns ``sha256:<hex>``."""
    hexd = hashlib.sha256(data).hexdigest()
    if not store.exists(content_key(hexd)):
        store.put_bytes(content_key(hexd), data)
    return f"sha256:{hexd}"


def push_image(session: Session, store: BlobStore, path: Path, filename: str | None = None) -> str:
    """Store one image (``registry images push``) and record it. Returns ``sha256:<hex>``.

    Raises:
        InvalidRequest: (field ``file``) the file's extension is not an image type.
    """
    name = filename or path.name
    media = IMAGE_TYPES.get(PurePosixPath(name).suffix.lower())
    if media is None:
        raise InvalidRequest(
            f"{name} is not an image: use one of {', '.join(sorted(IMAGE_TYPES))}.", field="file"
        )
    digest, size = store_file(store, path)
    if session.get(RegistryImage, digest) is None:
        session.merge(RegistryImage(digest=digest, size=size, media_type=media, filename=name))
        session.flush()
    return digest


def _image_slots(obj: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """``(holder, key)`` of every image location string in a row (see module docstring)."""
    if isinstance(obj, list):
        for x in obj:
            yield from _image_slots(x)
    elif isinstance(obj, dict):
        t = obj.get("type")
        if t == "image" and isinstance(obj.get("image"), str):
            yield obj, "image"
        elif t == "image_url" and isinstance(obj.get("image_url"), dict):
            if isinstance(obj["image_url"].get("url"), str):
                yield obj["image_url"], "url"
        for v in obj.values():
            if isinstance(v, (list, dict)):
                yield from _image_slots(v)


def local_image_paths(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(row index, path)`` for every image an example names by local path."""
    out = []
    for i, row in enumerate(rows):
        for holder, key in _image_slots(row):
            if not holder[key].startswith(_REMOTE):
                out.append((i, holder[key]))
    return out


def rewrite_images(
    rows: list[dict[str, Any]],
    upload: Any,
    source: str,
    *,
    first: int = 0,
    done: dict[str, str] | None = None,
) -> list[tuple[int, str, str]]:
    """Replace local image paths in ``rows`` (in place) by the digest ``upload(path)`` returns.

    ``upload(path) -> sha256:<hex> | None``; None means the image is missing, refused as
    ``example N: image PATH …``. Returns ``(row index, path, digest)`` for each image.
    ``first`` is the index of ``rows[0]`` in the file and ``done`` the paths uploaded so
    far, for a caller that passes the rows a few at a time.
    """
    done = {} if done is None else done
    out = []
    for i, row in enumerate(rows, start=first):
        for holder, key in _image_slots(row):
            path = holder[key]
            if path.startswith(_REMOTE):
                continue
            if path not in done:
                digest = upload(path)
                if digest is None:
                    raise InvalidRequest(
                        f"{source}: example {i + 1} names the image {path[:200]!r}, which is "
                        "not in the upload. Send the JSONL and its images as one ZIP "
                        "(`registry datasets register` packs images named beside the file), "
                        "or push them with `registry images push` and name them by digest.",
                        field=f"{source}:example {i + 1}",
                    )
                done[path] = digest
            holder[key] = done[path]
            out.append((i, path, done[path]))
    return out


def _safe_member(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return p


def _zip_members(path: Path, limit: int) -> dict[str, bytes]:
    """Every file member of a dataset ZIP by its (safe) name.

    Sizes are counted while decompressing (never trusting headers), so a ZIP bomb stops
    at ``limit`` expanded bytes.
    """
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InvalidRequest(f"The upload is not a valid ZIP file: {exc}.", field="file") from exc
    total = 0
    members: dict[str, bytes] = {}
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            p = _safe_member(info.filename)
            if p is None:
                raise InvalidRequest(
                    f"ZIP member {info.filename!r} escapes the archive root.", field="file"
                )
            buf = bytearray()
            with zf.open(info) as f:
                while chunk := f.read(CHUNK):
                    total += len(chunk)
                    if total > limit:
                        raise TooLarge(
                            f"The ZIP's files expand past the dataset limit of {mib(limit)} "
                            "(RegistryLimits.uploadBytes).",
                            field="file",
                        )
                    buf += chunk
            members[str(p)] = bytes(buf)
    return members


def _jsonl_member(members: dict[str, bytes]) -> tuple[bytes, str, dict[str, bytes]]:
    """The JSONL member of a dataset ZIP, its name, and every other member's bytes."""
    jsonl = [k for k in members if k.lower().endswith(".jsonl")]
    if len(jsonl) != 1:
        raise InvalidRequest(
            f"A dataset ZIP must hold exactly one .jsonl file (or prepared.json and its "
            f"Parquet files); this one holds {len(jsonl)}.",
            field="file",
        )
    name = jsonl[0]
    return members.pop(name), name, members


def _canonical_prepared(
    store: BlobStore, members: dict[str, bytes], source: str, beside: Path
) -> tuple[str, int, int, dict[str, Any]]:
    """Check prepared token rows (seeds/001 "Train prepared token rows as given") and
    store their canonical form: a header line (:func:`akka_optimize.data.prepared.
    header_of`) and one ``{"input_ids", "loss_mask"}`` line per row, in file order.

    Returns ``(sha256:<hex>, rows, bytes, header)``; nothing is stored when a row fails.
    """
    from ..data import prepared as P

    desc = P.parse_descriptor(members[P.DESCRIPTOR], f"{source}:{P.DESCRIPTOR}")
    vocab = desc["tokenizer"]["vocabSize"]
    fd, tmp_name = tempfile.mkstemp(dir=beside.parent, prefix=".canonical-", suffix=".part")
    tmp = Path(tmp_name)
    rows = longest = supervised = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for ids, mask in P.iter_rows(desc, members.get, vocab):
                out.write(canonical_line({"input_ids": ids, "loss_mask": mask}))
                rows, longest = rows + 1, max(longest, len(ids))
                supervised += sum(mask)
        P.check_counts(desc, rows, longest, supervised)
        header = P.header_of(desc, rows, longest, supervised)
        h = hashlib.sha256()
        final = tmp.with_suffix(".whole")
        try:
            with open(final, "wb") as out, open(tmp, "rb") as f:
                chunk = canonical_line(header)
                while chunk:
                    h.update(chunk)
                    out.write(chunk)
                    chunk = f.read(CHUNK)
            nbytes = final.stat().st_size
            if not store.exists(content_key(h.hexdigest())):
                store.put_file(content_key(h.hexdigest()), final)
        finally:
            final.unlink(missing_ok=True)
    finally:
        tmp.unlink(missing_ok=True)
    info = header["prepared"] | {"tokenizer": dict(desc["tokenizer"])}
    return f"sha256:{h.hexdigest()}", rows, nbytes, info


def _zip_uploader(session: Session, store: BlobStore, members: dict[str, bytes], base: str):
    def upload(path: str) -> str | None:
        key = str(PurePosixPath(base).parent / path) if base else path
        key = key.removeprefix("./")
        p = _safe_member(key)
        data = members.get(str(p)) if p else None
        if data is None:
            return None
        digest = store_bytes(store, data)
        media = IMAGE_TYPES.get(PurePosixPath(key).suffix.lower(), "application/octet-stream")
        if session.get(RegistryImage, digest) is None:
            session.merge(
                RegistryImage(digest=digest, size=len(data), media_type=media, filename=key)
            )
        return digest

    return upload


def _dir_uploader(session: Session, store: BlobStore, root: Path):
    """Images from a folder the client uploaded: only regular image files inside ``root``.

    Anything else (an absolute path, ``..``, a link leading out, a folder, a file that
    is not an image, a missing file) gives None, so every refusal reads the same.
    """
    base = root.resolve()

    def upload(path: str) -> str | None:
        rel = _safe_member(path.removeprefix("./"))
        if rel is None or PurePosixPath(rel).suffix.lower() not in IMAGE_TYPES:
            return None
        p = (base / rel).resolve()
        if not p.is_relative_to(base) or not p.is_file():
            return None
        return push_image(session, store, p)

    return upload


def _canonical_file(
    store: BlobStore, lines: Iterable[bytes], source: str, uploader: Any, beside: Path
) -> tuple[str, int, int, set[str]]:
    """Validate rows as they are read and store their canonical lines as one blob.

    Rows are read, checked and written out one at a time into a spool file beside the
    upload (hashed as it is written), so memory holds one row, never the file. The blob
    is stored only once every line has passed. Returns ``(sha256:<hex>, rows, bytes,
    image digests)``.
    """
    from ..data.jsonl import read_rows

    h = hashlib.sha256()
    count = nbytes = 0
    done: dict[str, str] = {}
    images: set[str] = set()
    fd, tmp_name = tempfile.mkstemp(dir=beside.parent, prefix=".canonical-", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for _, row in read_rows(lines, source):
                found = rewrite_images([row], uploader, source, first=count, done=done)
                images.update(d for _, _, d in found)
                line = canonical_line(row)
                h.update(line)
                out.write(line)
                count += 1
                nbytes += len(line)
        if not store.exists(content_key(h.hexdigest())):
            store.put_file(content_key(h.hexdigest()), tmp)
    finally:
        tmp.unlink(missing_ok=True)
    return f"sha256:{h.hexdigest()}", count, nbytes, images


def _no_files(_path: str) -> str | None:
    """A plain JSONL upload carries no files: every local image path is refused."""
    return None


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
            ID, pinned source and judge: :mod:`akka_optimize.evals.curation`).
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
    digest, count, nbytes, images, prepared = _canonical_upload(
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


def _canonical_upload(
    session: Session,
    store: BlobStore,
    path: Path,
    source: str,
    is_zip: bool,
    limits: RegistryLimits,
) -> tuple[str, int, int, set[str], dict[str, Any] | None]:
    """Check and store an upload's canonical rows: ``(digest, rows, bytes, image
    digests, prepared descriptor or None)``. A ZIP holds prepared token rows (with
    ``prepared.json``) or one JSONL file and the images its rows name; a JSONL file alone
    names no files (never the service's own disk: issue 14 item 2).

    Raises:
        TooLarge / InvalidRequest: as :func:`register_dataset` says.
    """
    if not is_zip:
        with open(path, "rb") as f:
            return (*_canonical_file(store, f, source, _no_files, path), None)
    members = _zip_members(path, limits.uploadBytes)
    if DESCRIPTOR in members:
        digest, count, nbytes, prepared = _canonical_prepared(store, members, source, path)
        return digest, count, nbytes, set(), prepared
    data, inner, members = _jsonl_member(members)
    uploader = _zip_uploader(session, store, members, inner)
    canon = _canonical_file(store, io.BytesIO(data), f"{source}:{inner}", uploader, path)
    return (*canon, None)


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
    if is_prepared(resolved):
        raise InvalidRequest(
            f"dataset {resolved.pinned} holds prepared token rows (prepared.json), which only "
            "a supervised run trains; give a dataset of messages rows here",
            field=field,
            code="prepared_rows",
        )
    data = store.get_bytes(content_key(resolved.digest.removeprefix("sha256:")))
    return [json.loads(line) for line in data.splitlines() if line]


def load_prepared_examples(
    store: BlobStore, resolved: ResolvedVersion
) -> tuple[dict[str, Any], list]:
    """The header and :class:`~akka_optimize.data.types.Example` list of a prepared dataset
    version (:func:`akka_optimize.data.prepared.examples_from_canonical`).

    Raises:
        NotFound: the version's blob is missing from the store.
    """
    from ..data.prepared import examples_from_canonical

    data = store.get_bytes(content_key(resolved.digest.removeprefix("sha256:")))
    return examples_from_canonical(data)


def open_object(store: BlobStore, resolved: ResolvedVersion):
    """Open the registered bytes (``registry datasets object``) for reading."""
    obj = resolved.metadata.get("object") or {"digest": resolved.digest}
    return store.open(content_key(obj["digest"].removeprefix("sha256:")))


def media_type_of(name: str) -> str:
    """A media type guess for a file name."""
    return mimetypes.guess_type(name)[0] or "application/octet-stream"
