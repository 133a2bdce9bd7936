"""A dataset version's rows read in place (issue 14 item 3): ``registry.row_view.JsonlRows``.

The service's dry run and data preview read a dataset's rows through this view, so they hold
the stored bytes plus 8 bytes per row, not every row parsed.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from akka_optimize.registry.blobs import canonical_line
from akka_optimize.registry.row_view import JsonlRows
from helpers import REPO


def _canonical(rows: list[dict]) -> bytes:
    return b"".join(canonical_line(r) for r in rows)


def test_the_view_reads_like_the_list_of_rows() -> None:
    rows = [{"messages": [{"role": "user", "content": f"q{i}\u2028"}], "n": i} for i in range(7)]
    data = _canonical(rows)
    view = JsonlRows(data + b"\n")  # a trailing blank line is no row
    assert len(view) == 7 and bool(view)
    assert list(view) == rows
    assert view[0] == rows[0] and view[-1] == rows[-1] and view[3] == rows[3]
    assert view[2:5] == rows[2:5] and view[::3] == rows[::3] and view[5:100] == rows[5:]
    with pytest.raises(IndexError, match="row index 7 out of range for 7 rows"):
        view[7]
    view[0]["n"] = 99  # a read row is a fresh dict: the view is unchanged
    assert view[0] == rows[0]
    assert len(JsonlRows(b"")) == 0 and not JsonlRows(b"\n\n")


def test_the_view_holds_the_bytes_and_a_few_bytes_per_row_not_the_parsed_rows() -> None:
    """3,000 GSM8K rows: the view adds under 20 bytes per row to the stored bytes (two
    8-byte offsets), while the parsed rows take several times the bytes themselves."""
    lines = (REPO / "data/gsm8k/train.jsonl").read_text().splitlines()[:3000]
    rows = [
        {
            "messages": [
                {"role": "user", "content": json.loads(x)["question"]},
                {"role": "assistant", "content": json.loads(x)["answer"]},
            ]
        }
        for x in lines
    ]
    data = _canonical(rows)
    del rows

    def held(make) -> int:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            kept = make()
            size = tracemalloc.get_traced_memory()[0] - base
            del kept
            return size
        finally:
            tracemalloc.stop()

    view = held(lambda: JsonlRows(data))
    parsed = held(lambda: [json.loads(line) for line in data.splitlines()])
    assert view / 3000 < 20, view
    assert parsed > 2 * len(data), (parsed, len(data))
