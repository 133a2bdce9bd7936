"""Registry benchmark: registering a large JSONL dataset, MB/s beside ``sha256sum``.

Builds a JSONL file of chat rows (200 MB; 20 MB with ``quick``) and measures, in the same
process run:

- ``registry.register_dataset``: the whole registration (read, validate every row with
  line numbers, canonicalise, digest the canonical examples, store both blobs, insert the
  version) into a fresh SQLite state and local blob folder;
- ``registry.store_file``: the streaming digest + content-addressed store of the raw file
  alone (what an upload's bytes cost without row validation).

The baseline is ``sha256sum`` on the same file (the cost of only reading and hashing it);
ratio = ours / baseline MB/s (1.0 would mean registration is as fast as hashing).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def _write_jsonl(path: Path, target_bytes: int) -> int:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    written = rows = 0
    with open(path, "w") as f:
        while written < target_bytes:
            q = " ".join(rng.choices(words, k=40))
            a = " ".join(rng.choices(words, k=120))
            r = {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            line = json.dumps(r) + "\n"
            f.write(line)
            written += len(line)
            rows += 1
    return rows


def _sha256sum_mbps(path: Path, mb: float) -> float:
    exe = shutil.which("sha256sum")
    if exe is None:
        import hashlib

        t = time.perf_counter()
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return mb / (time.perf_counter() - t)
    t = time.perf_counter()
    subprocess.run([exe, str(path)], check=True, capture_output=True)
    return mb / (time.perf_counter() - t)


def run(quick: bool) -> list[dict]:
    """Measure registration throughput; see the module docstring."""
    from akka_optimize.db import Database
    from akka_optimize.db.migrate import upgrade
    from akka_optimize.registry import register_dataset
    from akka_optimize.registry.datasets import store_file
    from akka_optimize.store import BlobStore

    target = (20 if quick else 200) * 1000**2
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        f = d / "train.jsonl"
        rows = _write_jsonl(f, target)
        mb = f.stat().st_size / 1e6
        _sha256sum_mbps(f, mb)  # warm the page cache for both sides
        base = max(_sha256sum_mbps(f, mb) for _ in range(2))

        store = BlobStore(str(d / "blobs-raw"))
        t = time.perf_counter()
        store_file(store, f)
        raw = mb / (time.perf_counter() - t)

        url = f"sqlite:///{d / 'state.db'}"
        upgrade(url)
        db = Database(url)
        store = BlobStore(str(d / "blobs"))
        t = time.perf_counter()
        with db.session() as s:
            rv, created = register_dataset(s, store, "bench/train", f)
        full = mb / (time.perf_counter() - t)
        db.dispose()
        assert created and rv.metadata["rows"] == rows
    detail = f"{mb:.0f} MB JSONL, {rows:,} rows; baseline: sha256sum of the same file"
    return [
        {
            "name": "registry.register_dataset",
            "value": round(full, 1),
            "unit": "MB/s",
            "baseline": round(base, 1),
            "ratio": round(full / base, 3),
            "detail": detail + "; ours validates, canonicalises, digests and stores",
        },
        {
            "name": "registry.store_file",
            "value": round(raw, 1),
            "unit": "MB/s",
            "baseline": round(base, 1),
            "ratio": round(raw / base, 3),
            "detail": detail + "; ours: streaming SHA-256 + content-addressed copy",
        },
    ]


if __name__ == "__main__":
    for r in run(quick=True):
        print(r)
