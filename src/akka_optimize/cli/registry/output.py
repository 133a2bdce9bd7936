"""Text output of the ``registry`` commands: ``key  value`` lines for one version and
tables of versions and named artifacts (references and digests never wrapped).
"""

from __future__ import annotations

import json
from typing import Any

from ..output import print_table


def kv(pairs: list[tuple[str, Any]]) -> None:
    """``key  value`` lines, never wrapped (references and digests must stay copyable)."""
    w = max((len(k) for k, _ in pairs), default=0)
    for k, v in pairs:
        print(f"{k.ljust(w)}  {'' if v is None else v}")


def show_version(d: dict[str, Any], wide: bool) -> None:
    pairs = [
        ("ref", d.get("ref")),
        ("name", d.get("name")),
        ("version", d.get("version")),
        ("digest", d.get("digest")),
        ("aliases", ", ".join(d.get("aliases") or []) or None),
        ("size", d.get("size")),
        ("created", d.get("createdAt")),
    ]
    if d.get("baseModel") or d.get("source") == "adapter":
        pairs += [
            ("base model", d.get("baseModel")),
            ("parent model", d.get("parentModel")),
            ("run", d.get("runId")),
        ]
    meta = d.get("metadata") or {}
    for k in ("rows", "files", "format", "repository", "commit"):
        if meta.get(k) is not None:
            pairs.append((k, meta[k]))
    if meta.get("annotations"):
        pairs.append(("annotations", json.dumps(meta["annotations"], sort_keys=True)))
    if "created" in d and d.get("created") is not None:
        pairs.insert(0, ("registered", "new version" if d["created"] else "existing version"))
    if wide:
        pairs.append(("metadata", json.dumps(meta, sort_keys=True)))
    kv(pairs)


def show_versions(d: dict[str, Any], wide: bool) -> None:
    cols = [("VERSION", "version"), ("DIGEST", "digest"), ("ALIASES", "aliasText")]
    cols += [("CREATED", "createdAt")] + ([("REF", "ref")] if wide else [])
    rows = [{**v, "aliasText": ", ".join(v.get("aliases") or [])} for v in d["items"]]
    print_table(rows, cols)


def show_list(d: dict[str, Any], wide: bool) -> None:
    rows = [
        {**v, "aliasText": ", ".join(f"{a}→{x}" for a, x in (v.get("aliases") or {}).items())}
        for v in d["items"]
    ]
    cols = [("NAME", "name"), ("LATEST", "latest"), ("ALIASES", "aliasText")]
    print_table(rows, cols + ([("DIGEST", "digest")] if wide else []))
