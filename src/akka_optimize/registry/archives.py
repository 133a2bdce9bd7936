"""Tar archives from clients (scoring bundles, adapter uploads), read only when whole.

``tarfile`` stops at the archive's end marker, so a gzip stream cut after it (the
CRC and length trailer gone) was accepted, and one cut earlier failed with
``EOFError`` or ``zlib.error`` rather than a refusal. :func:`open_tar` first reads
a compressed archive (gzip, bzip2, xz) to its end, which checks the trailer, then
opens it; any damage is a 400 naming the file field.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ..deployment import RegistryLimits
from ..errors import InvalidRequest, TooLarge
from ..store import CHUNK

#: What a damaged or cut archive raises while it is read.
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)

_MAGIC: list[tuple[bytes, Callable[..., IO[bytes]]]] = [
    (b"\x1f\x8b", gzip.open),
    (b"BZh", bz2.open),
    (b"\xfd7zXZ\x00", lzma.open),
]


def _damaged(what: str, exc: BaseException) -> InvalidRequest:
    return InvalidRequest(
        f"The {what} is not a complete, readable archive (it ends early or is damaged: "
        f"{str(exc)[:200] or type(exc).__name__}); upload it again.",
        field="file",
    )


def check_compressed(path: Path, limits: RegistryLimits, what: str) -> None:
    """Read a compressed archive to its end so a cut or damaged stream is refused.

    Raises:
        InvalidRequest: (``file``) the stream ends early or fails its check.
        TooLarge: (``file``) it expands past ``bundleExpandedBytes`` (plus tar headers).
    """
    with open(path, "rb") as f:
        head = f.read(8)
    opener = next((o for magic, o in _MAGIC if head.startswith(magic)), None)
    if opener is None:
        return
    cap = limits.bundleExpandedBytes + limits.bundleExpandedBytes // 8 + 16 * 2**20
    total = 0
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(CHUNK):
                total += len(chunk)
                if total > cap:
                    raise TooLarge(
                        f"The {what} expands past the limit of {limits.bundleExpandedBytes:,} "
                        "bytes (RegistryLimits.bundleExpandedBytes).",
                        field="file",
                    )
    except ARCHIVE_ERRORS as exc:
        raise _damaged(what, exc) from None


@contextmanager
def open_tar(path: Path, limits: RegistryLimits, what: str) -> Iterator[tarfile.TarFile]:
    """``tarfile.open(path)`` once :func:`check_compressed` passed; damage is a 400.

    Raises:
        InvalidRequest: (``file``) not a tar archive, cut, or damaged.
    """
    check_compressed(path, limits, what)
    try:
        tf: Any = tarfile.open(path, "r:*")
    except ARCHIVE_ERRORS as exc:
        raise _damaged(what, exc) from None
    with tf:
        try:
            yield tf
        except ARCHIVE_ERRORS as exc:
            raise _damaged(what, exc) from None
