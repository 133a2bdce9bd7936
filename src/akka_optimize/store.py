"""Blob store over fsspec: a local folder by default, ``s3://`` in a cluster.

A blob becomes visible only when complete: writers stream into a temporary key
under ``.tmp/`` and commit with a move (a rename on a local disk, a copy then
delete on object stores, where each object put is itself atomic). A crash
leaves at most an orphan under ``.tmp/``, which readers never list or open and
:meth:`BlobStore.sweep_tmp` removes at service start.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import fsspec

from .errors import NotFound
from .testhooks import hold

CHUNK = 1 << 20  # 1 MiB


class BlobStore:
    """Content-addressed and named blobs under one fsspec root.

    Keys are ``/``-separated relative paths such as ``sha256/ab/abcdef…`` or
    ``runs/RUN/state/step-4/adapter.safetensors``.
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options)
        self.root = self.root.rstrip("/")
        self.local = getattr(self.fs, "protocol", None) in ("file", ("file", "local"))
        if self.local:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)

    # -- paths --------------------------------------------------------------
    def _path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"blob key {key!r} escapes the store root")
        return f"{self.root}/{key}"

    def local_path(self, key: str) -> str | None:
        """A filesystem path for ``key`` when the store is a local folder, else ``None``."""
        return self._path(key) if self.local else None

    # -- writing ------------------------------------------------------------
    @contextmanager
    def writer(self, key: str) -> Iterator[IO[bytes]]:
        """Open ``key`` for writing; it becomes visible only if the block exits cleanly.

        Raises whatever the block raises, after removing the temporary object.
        """
        tmp = self._path(f".tmp/{uuid.uuid4().hex}")
        self.fs.makedirs(tmp.rsplit("/", 1)[0], exist_ok=True)
        f = self.fs.open(tmp, "wb")
        try:
            yield f
            f.flush()
            hold("blob-write")  # tests only: the bytes are written, not yet committed
            if self.local:
                os.fsync(f.fileno())
            f.close()
        except BaseException:
            f.close()
            self.fs.rm(tmp)
            raise
        self._commit(tmp, self._path(key))

    def _commit(self, tmp: str, final: str) -> None:
        parent = final.rsplit("/", 1)[0]
        if self.local:
            # Local blobs are private to the service's user: folders 0700, files 0600.
            os.makedirs(parent, mode=0o700, exist_ok=True)
            os.chmod(tmp, 0o600)
            os.replace(tmp, final)
            return
        self.fs.makedirs(parent, exist_ok=True)
        self.fs.mv(tmp, final)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` atomically."""
        with self.writer(key) as f:
            f.write(data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Copy a local file to ``key`` atomically, streaming 1 MiB chunks."""
        with open(path, "rb") as src, self.writer(key) as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)

    def put_stream_content_addressed(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Stream ``chunks`` into the store keyed by their SHA-256.

        Returns:
            ``(digest, size)`` where digest is ``sha256:<64 hex>`` and size is in bytes.
        """
        h = hashlib.sha256()
        size = 0
        tmp = self._path(f".tmp/{uuid.uuid4().hex}")
        self.fs.makedirs(tmp.rsplit("/", 1)[0], exist_ok=True)
        try:
            with self.fs.open(tmp, "wb") as f:
                for c in chunks:
                    h.update(c)
                    size += len(c)
                    f.write(c)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm(tmp)
            raise
        digest = h.hexdigest()
        key = content_key(digest)
        if self.exists(key):
            self.fs.rm(tmp)
        else:
            self._commit(tmp, self._path(key))
        return f"sha256:{digest}", size

    # -- reading ------------------------------------------------------------
    def exists(self, key: str) -> bool:
        """Whether a committed blob is at ``key``."""
        return bool(self.fs.exists(self._path(key)))

    def open(self, key: str) -> IO[bytes]:
        """Open a committed blob for reading. Raises :class:`NotFound`."""
        if not self.exists(key):
            raise NotFound(f"Blob {key} is not in the store at {self.url}.")
        return self.fs.open(self._path(key), "rb")

    def get_bytes(self, key: str) -> bytes:
        """The whole blob at ``key``. Raises :class:`NotFound`."""
        with self.open(key) as f:
            return f.read()

    def get_file(self, key: str, dest: str | os.PathLike[str]) -> None:
        """Copy the blob at ``key`` to the local path ``dest``."""
        with self.open(key) as src, open(dest, "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)

    def size(self, key: str) -> int:
        """Size of the blob at ``key`` in bytes."""
        return int(self.fs.size(self._path(key)))

    def list(self, prefix: str) -> list[str]:
        """Committed keys under ``prefix`` (never temporary objects)."""
        base = self._path(prefix.rstrip("/"))
        if not self.fs.exists(base):
            return []
        out = []
        for p in self.fs.find(base):
            rel = p[len(self.root) + 1 :] if p.startswith(self.root) else p
            if not rel.startswith(".tmp/"):
                out.append(rel)
        return sorted(out)

    def copy_prefix(self, src: str, dst: str) -> int:
        """Copy every committed blob under ``src`` to the same name under ``dst``
        (each atomically, streamed). Returns the bytes copied."""
        total = 0
        src = src.rstrip("/")
        for key in self.list(src):
            with self.open(key) as f, self.writer(dst.rstrip("/") + key[len(src) :]) as out:
                while chunk := f.read(CHUNK):
                    out.write(chunk)
                    total += len(chunk)
        return total

    def delete(self, key: str) -> None:
        """Remove a blob or a prefix; missing keys are ignored."""
        p = self._path(key)
        if self.fs.exists(p):
            self.fs.rm(p, recursive=True)

    def sweep_tmp(self) -> int:
        """Remove temporary objects left by crashed writers. Returns how many."""
        base = self._path(".tmp")
        if not self.fs.exists(base):
            return 0
        items = self.fs.ls(base, detail=False)
        for p in items:
            self.fs.rm(p, recursive=True)
        return len(items)


def content_key(hex_digest: str) -> str:
    """The key of a content-addressed blob: ``sha256/ab/<64 hex>``."""
    return f"sha256/{hex_digest[:2]}/{hex_digest}"
