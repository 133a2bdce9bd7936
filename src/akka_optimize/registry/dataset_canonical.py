"""The canonical rows of a dataset upload: unpack a ZIP safely, check the examples (or
prepared token rows) one at a time and store their canonical form as one blob whose
SHA-256 is the version's digest.

Memory: a JSONL file is read, checked and written out one row at a time, so a
registration holds one row, not the file; a ZIP's files are held in memory while it
registers (at most ``uploadBytes`` after extraction).
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..data.jsonl import read_rows
from ..data.prepared import rows as P
from ..data.prepared.rows import DESCRIPTOR
from ..deployment import RegistryLimits
from ..errors import InvalidRequest, TooLarge
from ..store import CHUNK, BlobStore, content_key
from .blobs import canonical_line, mib
from .images import no_files, rewrite_images, safe_member, zip_uploader


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
            p = safe_member(info.filename)
            if p is None:
                raise InvalidRequest(
                    f"ZIP member {info.filename!r} escapes the archive root.", field="file"
                )
            buf = bytearray()
            try:
                with zf.open(info) as f:
                    while chunk := f.read(CHUNK):
                        total += len(chunk)
                        if total > limit:
                            raise TooLarge(
                                f"The ZIP's files expand past the dataset limit of "
                                f"{mib(limit)} (RegistryLimits.uploadBytes).",
                                field="file",
                            )
                        buf += chunk
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError):
                # a failed CRC, damaged compressed data, a method or encryption zipfile
                # cannot read: the member, not the service, is at fault (issue 48 item 5)
                raise InvalidRequest(
                    f"ZIP member {info.filename!r} is damaged or cannot be read (a failed "
                    "checksum, cut or damaged compressed data, or an encrypted member); "
                    "pack the dataset again.",
                    field="file",
                ) from None
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
    store their canonical form: a header line (:func:`akka_optimize.data.prepared.rows.
    header_of`) and one ``{"input_ids", "loss_mask"}`` line per row, in file order.

    Returns ``(sha256:<hex>, rows, bytes, header)``; nothing is stored when a row fails.
    """

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


def _canonical_file(
    store: BlobStore, lines: Iterable[bytes], source: str, uploader: Any, beside: Path
) -> tuple[str, int, int, set[str]]:
    """Validate rows as they are read and store their canonical lines as one blob.

    Rows are read, checked and written out one at a time into a spool file beside the
    upload (hashed as it is written), so memory holds one row, never the file. The blob
    is stored only once every line has passed. Returns ``(sha256:<hex>, rows, bytes,
    image digests)``.
    """

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


def canonical_upload(
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
            return (*_canonical_file(store, f, source, no_files, path), None)
    members = _zip_members(path, limits.uploadBytes)
    if DESCRIPTOR in members:
        digest, count, nbytes, prepared = _canonical_prepared(store, members, source, path)
        return digest, count, nbytes, set(), prepared
    data, inner, members = _jsonl_member(members)
    uploader = zip_uploader(session, store, members, inner)
    canon = _canonical_file(store, io.BytesIO(data), f"{source}:{inner}", uploader, path)
    return (*canon, None)
