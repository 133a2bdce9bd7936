"""Where a submitted recipe may read (issue 48 item 2): its ``model.path`` and
``data.path`` lie under a folder of ``service.recipeRoots``, resolved with every link
followed, and every refusal but a relative path reads the same."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InvalidRequest

REFUSED_PATH = (
    "{field} is not a {kind} under the folders this service reads recipes from "
    "(service.recipeRoots in its deployment file); name one inside them, by a path whose "
    "links stay inside."
)
"""The one sentence for every refused recipe path: outside the roots, through ``..`` or a
link that leads out, missing, or of the wrong kind read the same (issue 48 item 2: the
answer tells nothing about the service's files)."""


def confined_path(value: Any, field: str, roots: list[str], folder: bool) -> str:
    """``value`` resolved (every link followed, ``..`` folded) when it is an existing
    folder (``folder``) or regular file lying under one of ``roots``, resolved the same way.

    Returns:
        The resolved absolute path, which is what the service and the worker then read (so a
        link changed after the check cannot lead out).

    Raises:
        InvalidRequest: (``field``) a relative path, or :data:`REFUSED_PATH` for any other
            refusal, the same sentence whatever the reason.
    """
    if isinstance(value, str) and value and not Path(value).is_absolute():
        raise InvalidRequest(
            f"{field} {value!r} is relative; a submitted recipe names absolute paths that "
            "the service and the workers both read (`training recipes submit` makes a recipe "
            "file's relative paths absolute).",
            field=field,
        )
    refused = InvalidRequest(
        REFUSED_PATH.format(field=field, kind="folder" if folder else "file"), field=field
    )
    if not isinstance(value, str) or not value or "\x00" in value:
        raise refused
    try:
        real = Path(os.path.realpath(value, strict=True))
        ok = real.is_dir() if folder else real.is_file()
    except (OSError, ValueError):
        raise refused from None
    for root in roots:
        try:
            base = Path(os.path.realpath(root, strict=True))
        except (OSError, ValueError):
            continue
        if ok and Path(root).is_absolute() and real.is_relative_to(base):
            return str(real)
    raise refused


def confine(doc: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    """``doc`` with ``model.path`` and ``data.path`` resolved inside ``roots``
    (:func:`confined_path`); other fields as given."""
    out = dict(doc)
    for part, folder in (("model", True), ("data", False)):
        ref = doc.get(part)
        if isinstance(ref, dict) and "path" in ref:
            out[part] = {**ref, "path": confined_path(ref["path"], f"{part}.path", roots, folder)}
    return out
