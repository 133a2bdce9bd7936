"""Copying folders to and from the blob store, under a key prefix.

Used by the worker's training code (uploading saves, downloading the state a resumed attempt
starts from) and by the service (materialising an adapter to register it); both import it,
it imports neither.
"""

from __future__ import annotations

from pathlib import Path

from ..store import BlobStore


def upload_dir(store: BlobStore, local: Path, prefix: str) -> int:
    """Copy every file under ``local`` to ``prefix`` in the store; returns bytes written."""
    total = 0
    for p in sorted(local.rglob("*")):
        if p.is_file():
            store.put_file(f"{prefix}/{p.relative_to(local).as_posix()}", p)
            total += p.stat().st_size
    return total


def download_prefix(store: BlobStore, prefix: str, dest: Path) -> Path:
    """Materialise every blob under ``prefix`` into ``dest`` (keys relative to ``prefix``)."""
    for key in store.list(prefix):
        out = dest / key[len(prefix) :].lstrip("/")
        out.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(key, out)
    return dest
