"""Registration memory is bounded by the limits, not the row count (issue 14 item 3).

A JSONL of many tiny rows used to peak at about 29x the upload (the file, its text, every
parsed row and the canonical bytes were all held at once). Rows now stream through a
spool file, so peak Python memory stays under ``K`` times the upload plus the store's
copy buffers (a few ``CHUNK`` of 1 MiB, whatever the file's size); measured with
tracemalloc in this process, which sees every Python allocation of the registration."""

from __future__ import annotations

import tracemalloc

from registry_testkit import make_registry

from akka_optimize.registry import load_dataset_rows, register_dataset
from akka_optimize.store import CHUNK

K = 0.25
BUFFERS = 3 * CHUNK
ROWS = 20_000


def test_registering_many_tiny_rows_peaks_under_k_times_the_upload(tmp_path):
    db, store = make_registry(tmp_path)
    path = tmp_path / "tiny.jsonl"
    with open(path, "w") as f:
        for i in range(ROWS):
            f.write(f'{{"prompt": "q{i}", "completion": "a"}}\n')
    size = path.stat().st_size
    try:
        tracemalloc.start()
        with db.session() as s:
            version, created = register_dataset(s, store, "triage/tiny", path)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert created and version.metadata["rows"] == ROWS
        assert size > 700_000
        assert peak < BUFFERS + K * size, f"peak {peak:,} bytes for a {size:,}-byte upload"
        rows = load_dataset_rows(store, version)
        assert len(rows) == ROWS
        assert rows[-1]["messages"][0]["content"] == f"q{ROWS - 1}"
    finally:
        db.dispose()
