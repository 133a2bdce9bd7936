"""Content-addressed blobs of registry uploads: store a file or bytes under their SHA-256,
write one canonical JSON line (sorted keys, no spaces, UTF-8), and phrase byte sizes for
limit sentences.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..store import CHUNK, BlobStore, content_key

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
