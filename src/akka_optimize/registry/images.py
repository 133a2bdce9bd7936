"""Images of dataset examples: the image types, ``registry images push``, finding and
rewriting the local image paths an example names, and the uploaders that resolve those
paths (inside an uploaded ZIP or folder only; a plain JSONL upload names no files).

An example names a local image by path in a content part ``{"type": "image", "image":
PATH}`` or ``{"type": "image_url", "image_url": {"url": PATH}}``; a location starting
``http://``, ``https://``, ``data:`` or ``sha256:`` is left as it is.

The service never reads its own files because a row names them, and answers every
refused path with the same sentence, whether or not a file of that name exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.registry import RegistryImage
from ..errors import InvalidRequest
from ..store import BlobStore, content_key
from .blobs import store_bytes, store_file

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp", ".bmp": "image/bmp"}  # fmt: skip
_REMOTE = ("http://", "https://", "data:", "sha256:")
_HEX64 = re.compile(r"[0-9a-f]{64}")


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


def image_bytes(store: BlobStore, digest: str) -> bytes:
    """The bytes of a stored image named by its ``sha256:<hex>`` digest (what training
    reads for an image row, :mod:`akka_optimize.data.vision`).

    Raises:
        KeyError: ``digest`` is not a digest, or no blob of it is stored.
    """
    hexd = digest.removeprefix("sha256:")
    if not _HEX64.fullmatch(hexd) or not store.exists(content_key(hexd)):
        raise KeyError(digest)
    return store.get_bytes(content_key(hexd))


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


def safe_member(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return p


def zip_uploader(session: Session, store: BlobStore, members: dict[str, bytes], base: str):
    def upload(path: str) -> str | None:
        key = str(PurePosixPath(base).parent / path) if base else path
        key = key.removeprefix("./")
        p = safe_member(key)
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


def dir_uploader(session: Session, store: BlobStore, root: Path):
    """Images from a folder the client uploaded: only regular image files inside ``root``.

    Anything else (an absolute path, ``..``, a link leading out, a folder, a file that
    is not an image, a missing file) gives None, so every refusal reads the same.
    """
    base = root.resolve()

    def upload(path: str) -> str | None:
        rel = safe_member(path.removeprefix("./"))
        if rel is None or PurePosixPath(rel).suffix.lower() not in IMAGE_TYPES:
            return None
        p = (base / rel).resolve()
        if not p.is_relative_to(base) or not p.is_file():
            return None
        return push_image(session, store, p)

    return upload


def no_files(_path: str) -> str | None:
    """A plain JSONL upload carries no files: every local image path is refused."""
    return None
