"""Scoring bundles in the registry (seeds/001 "Scoring bundles live in the registry").

A bundle is a folder of files (grader code and data). It travels as a tar archive
(optionally gzip-compressed) or is read from a local folder. Every file is stored as a
content-addressed blob; the version's digest is over the manifest ``{path: digest}``, so
the same files give the same version.

Checks, all made before anything is stored (so a refusal leaves nothing behind): a path
escaping the bundle root (``../``, absolute) or a link is refused; limits
``bundleCompressedBytes`` (256 MiB) on the archive, ``bundleExpandedBytes`` (2 GiB) on the
files and ``bundleFiles`` (10,000) on their number, unless the deployment sets others.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sqlalchemy.orm import Session

from ..deployment import RegistryLimits
from ..errors import InvalidRequest, TooLarge
from ..refs import parse_ref
from ..store import CHUNK, BlobStore
from .archives import open_tar
from .core import ResolvedVersion, check_alias, register_version, sha256_json
from .datasets import mib, store_file
from .models import download_model_files


def _check_path(name: str) -> str:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.startswith("\\"):
        raise InvalidRequest(
            f"Bundle path {name!r} escapes the bundle root; use paths inside the folder.",
            field="file",
        )
    return str(p)


def _check_totals(files: int, expanded: int, limits: RegistryLimits) -> None:
    if files > limits.bundleFiles:
        raise TooLarge(
            f"The bundle holds {files:,} files; the limit is {limits.bundleFiles:,} "
            "(RegistryLimits.bundleFiles).",
            field="file",
        )
    if expanded > limits.bundleExpandedBytes:
        raise TooLarge(
            f"The bundle's files expand to {mib(expanded)}; the limit is "
            f"{mib(limits.bundleExpandedBytes)} (RegistryLimits.bundleExpandedBytes).",
            field="file",
        )


def scan_tar(tf: tarfile.TarFile, limits: RegistryLimits) -> list[tarfile.TarInfo]:
    members, total = [], 0
    for m in tf:
        _check_path(m.name)
        if m.isdir():
            continue
        if m.issym() or m.islnk():
            raise InvalidRequest(
                f"Bundle entry {m.name!r} is a link; a bundle may hold only regular files.",
                field="file",
            )
        if not m.isfile():
            raise InvalidRequest(f"Bundle entry {m.name!r} is not a regular file.", field="file")
        members.append(m)
        total += m.size
        _check_totals(len(members), total, limits)
    if not members:
        raise InvalidRequest("The bundle holds no files.", field="file")
    return members


def _chunks(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def _scan_dir(root: Path, limits: RegistryLimits) -> list[tuple[str, Path]]:
    out, total = [], 0
    for cur, dirs, files in os.walk(root):
        for d in dirs:
            if (Path(cur) / d).is_symlink():
                raise InvalidRequest(f"Bundle folder {Path(cur) / d} is a link.", field="file")
        dirs.sort()
        for f in sorted(files):
            p = Path(cur) / f
            if p.is_symlink() or not p.is_file():
                raise InvalidRequest(
                    f"Bundle entry {p} is a link or not a regular file; a bundle may hold only "
                    "regular files inside its folder.",
                    field="file",
                )
            out.append((p.relative_to(root).as_posix(), p))
            total += p.stat().st_size
            _check_totals(len(out), total, limits)
    if not out:
        raise InvalidRequest(f"The bundle folder {root} holds no files.", field="file")
    return out


def register_bundle(
    session: Session,
    store: BlobStore,
    ref: str,
    path: Path,
    *,
    alias: str | None = None,
    limits: RegistryLimits | None = None,
    project: str | None = None,
) -> tuple[ResolvedVersion, bool]:
    """Register a scoring bundle (a local folder, or a tar / tar.gz archive of one).

    Returns:
        ``(version, created)``; ``created`` is False when the same files were registered.

    Raises:
        TooLarge: an archive over ``bundleCompressedBytes``, files over
            ``bundleExpandedBytes`` or more than ``bundleFiles`` files.
        InvalidRequest: a path escaping the root, a link, an unreadable archive, no files.
    """
    limits = limits or RegistryLimits()
    target = parse_ref(ref, project)
    if alias:
        check_alias(alias)  # before any blob is stored
    path = Path(path)
    files: dict[str, Any] = {}
    if path.is_dir():
        for rel, p in _scan_dir(path, limits):
            digest, size = store_file(store, p)
            files[rel] = {"digest": digest, "size": size}
    else:
        size = path.stat().st_size
        if size > limits.bundleCompressedBytes:
            raise TooLarge(
                f"The bundle archive is {mib(size)}; the limit is "
                f"{mib(limits.bundleCompressedBytes)} (RegistryLimits.bundleCompressedBytes).",
                field="file",
            )
        with open_tar(path, limits, "bundle upload") as tf:
            members = scan_tar(tf, limits)
            for m in members:
                f = tf.extractfile(m)
                assert f is not None
                digest, n = store.put_stream_content_addressed(_chunks(f))
                files[_check_path(m.name)] = {"digest": digest, "size": n}
    digest = sha256_json({k: v["digest"] for k, v in files.items()})
    meta = {"files": len(files), "bytes": sum(v["size"] for v in files.values())}
    return register_version(
        session,
        "bundle",
        target,
        digest,
        alias=alias,
        size=meta["bytes"],
        files=files,
        metadata_=meta,
        source="upload",
    )


def download_bundle(store: BlobStore, resolved: ResolvedVersion, dest: Path) -> Path:
    """Materialise a bundle version's files under ``dest`` (what graders import). Returns dest."""

    return download_model_files(store, resolved, dest)
