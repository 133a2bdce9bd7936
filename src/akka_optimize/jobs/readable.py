"""The readable-storage guard: a job is refused at submit when its dataset or scoring
bundle lies where the training jobs cannot read it (seeds/001 "Optimize refuses a run, a
pipeline, or an evaluation whose dataset or scoring bundle its training jobs cannot read.
The reason identifies the part of the location that did not match. The refusal occurs
when you submit, before any GPU is claimed"; FEATURES F019; issue 19 item 3).

A version's files are blobs of the service's store (``AKKA_OPTIMIZE_BLOBS_URL``), at
``STORE/sha256/ab/<digest>``. The deployment's ``jobStorage.readable`` lists where the
jobs' executor can read (fsspec URLs such as ``s3://bucket/prefix``, or absolute local
paths); left null, the jobs read the service's store itself and nothing is refused. A
location matches a grant when its scheme, its bucket (the URL's host) and every path
segment of the grant's prefix agree; the refusal names the first part that does not, for
the grant that matched most.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from ..errors import InvalidRequest
from ..store import content_key
from .context import JobContext

CODE = "storage_unreadable"
"""The refusal's ``code``."""


def _parts(location: str) -> tuple[str, str, list[str]]:
    """``(scheme, bucket, path segments)`` of an fsspec URL or a local path."""
    if "://" not in location:
        return "file", "", [p for p in os.path.abspath(location).split("/") if p]
    u = urlsplit(location)
    scheme = u.scheme.lower()
    if scheme == "file":
        return "file", "", [p for p in u.path.split("/") if p]
    return scheme, u.netloc, [p for p in u.path.split("/") if p]


def mismatch(location: str, grant: str) -> tuple[int, str] | None:
    """None when ``location`` lies under ``grant``; else ``(how many parts matched, the
    phrase naming the first part that did not)``."""
    scheme, bucket, path = _parts(location)
    g_scheme, g_bucket, g_path = _parts(grant)
    if scheme != g_scheme:
        return 0, f"the scheme {scheme}:// (granted: {g_scheme}://)"
    if bucket != g_bucket:
        return 1, f"the bucket {bucket!r} (granted: {g_bucket!r})"
    for i, want in enumerate(g_path):
        if i >= len(path) or path[i] != want:
            got = "/".join(path[: i + 1]) or "/"
            return 2 + i, f"the prefix {got!r} (granted: {'/'.join(g_path)!r})"
    return None


def unreadable(readable: list[str] | None, location: str) -> str | None:
    """The phrase naming the part of ``location`` no grant in ``readable`` covers, or None
    when the jobs can read it (``readable`` None: they read the service's store)."""
    if readable is None:
        return None
    if not readable:
        return "any part (jobStorage.readable is empty: the jobs can read nothing)"
    misses = []
    for grant in readable:
        miss = mismatch(location, grant)
        if miss is None:
            return None
        misses.append(miss)
    return max(misses, key=lambda m: m[0])[1]


def blob_location(blobs_url: str, digest: str) -> str:
    """Where blob ``digest`` (``sha256:…``) lies: the store's URL joined with its key."""
    return f"{blobs_url.rstrip('/')}/{content_key(digest.removeprefix('sha256:'))}"


def check_readable(ctx: JobContext, field: str, version: Any) -> None:
    """Refuse ``version`` (a dataset or bundle :class:`akka_optimize.registry.ResolvedVersion`)
    when a file of it lies where the jobs cannot read.

    Raises:
        InvalidRequest: ``storage_unreadable`` (field ``field``), naming the location and
            the part that did not match.
    """

    readable = ctx.deployment().jobStorage.readable
    if readable is None:
        return
    digests = [info["digest"] for info in (version.files or {}).values()] or [version.digest]
    for digest in digests:
        location = blob_location(str(ctx.settings.blobs_url), digest)
        part = unreadable(readable, location)
        if part is not None:
            raise InvalidRequest(
                f"{field} {version.pinned}: the training jobs cannot read it: it lies at "
                f"{location}, and {part} is outside what jobStorage.readable grants them "
                f"({', '.join(readable) or 'nothing'}).",
                field=field,
                code=CODE,
            )
