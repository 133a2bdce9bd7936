"""Shared helpers of the registry tests: a migrated database and a blob store in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from akka_optimize.db import Database
from akka_optimize.db.migrate import upgrade
from akka_optimize.store import BlobStore


def row(q: str, a: str = "ok") -> dict[str, Any]:
    """One valid conversation row."""
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def write_jsonl(path: Path, rows: list[Any], **dump_kw: Any) -> Path:
    """Write rows one per line (``dump_kw`` changes spacing/key order, not content)."""
    path.write_text("".join(json.dumps(r, **dump_kw) + "\n" for r in rows))
    return path


def blob_keys(store: BlobStore) -> list[str]:
    """Every committed blob key."""
    return store.list("sha256")


def make_registry(tmp_path: Path) -> tuple[Database, BlobStore]:
    """``(Database, BlobStore)`` on a fresh SQLite file and a local blob folder."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    upgrade(url)
    return Database(url), BlobStore(str(tmp_path / "blobs"))
