"""A hold point for tests that must stop a worker at a named place, without a clock.

When the environment names a file in ``AKKA_OPTIMIZE_TEST_HOLD`` and that file exists
holding the name of a point (``step-3``, ``answer``), the process that reaches the point
writes ``<file>.held`` and waits until the test removes ``<file>``. Nothing else
changes: with the variable unset (every real deployment) :func:`hold` returns at once.
Used by the run-lifecycle tests (pause, resume, queued runs at a known update), the
serving idle test (an answer that lasts until the test lets it end), the catalog's
crash test (``fetch``: a base-model fetch stopped midway, so a kill lands inside it), the
local blob store's kill test (``blob-write``: a write flushed, not yet committed) and the
event-loop stall test (``write-gate``: a writer holding SQLite's write gate).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

VARIABLE = "AKKA_OPTIMIZE_TEST_HOLD"
LONGEST_HOLD_S = 600.0
"""A hold is released after this long (seconds) even if the test never removes the file,
so a failed test cannot leave a worker waiting for ever."""


def hold(point: str) -> None:
    """Wait at ``point`` while the hold file names it (see the module docstring)."""
    name = os.environ.get(VARIABLE)
    if not name:
        return
    path = Path(name)
    try:
        if path.read_text().strip() != point:
            return
    except OSError:
        return
    Path(f"{path}.held").write_text(point)
    deadline = time.monotonic() + LONGEST_HOLD_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
