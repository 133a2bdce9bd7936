"""A dataset version's canonical rows read in place: parsed when read, not all held at once.

Issue 14 item 3: the service's dry run, data preview and submit-time checks read every row
of a dataset. Parsed into Python dicts, a JSONL file of tiny rows took about 29× its size
in the service. :class:`JsonlRows` keeps the canonical bytes (1× the stored file) and one
8-byte offset per row, and parses a row when it is read: by index, by slice (a chunk of
findings) or by iteration. So a pass over the rows holds the bytes plus the rows being
worked on, whatever the row count.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload


class JsonlRows(Sequence[dict[str, Any]]):
    """The rows of canonical JSONL ``data`` (one JSON object per line), parsed on access.

    Args:
        data: the canonical bytes (UTF-8, ``\\n`` between rows; blank lines are skipped).

    Each access parses anew, so a row read twice is two equal dicts, and changing one
    changes nothing stored. Memory: ``len(data)`` plus 8 bytes per row.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data
        starts = array("Q")
        ends = array("Q")
        pos, size = 0, len(data)
        while pos < size:
            end = data.find(b"\n", pos)
            if end < 0:
                end = size
            if end > pos:
                starts.append(pos)
                ends.append(end)
            pos = end + 1
        self._starts, self._ends = starts, ends

    def __len__(self) -> int:
        return len(self._starts)

    def _row(self, i: int) -> dict[str, Any]:
        return json.loads(self._data[self._starts[i] : self._ends[i]])

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        """Row ``index`` (negative counts from the end), or a list of the rows of a slice.

        Raises:
            IndexError: ``index`` is out of range.
        """
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row index {index} out of range for {len(self)} rows")
        return self._row(index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._row(i)

    @property
    def nbytes(self) -> int:
        """The rows' size in bytes: every row's line and one newline each."""
        return sum(self._ends) - sum(self._starts) + len(self)

    def line(self, i: int) -> bytes:
        """Row ``i``'s canonical JSON line (0-based, without its newline), not parsed."""
        return self._data[self._starts[i] : self._ends[i]]

    def lines(self) -> Iterator[bytes]:
        """Every row's canonical JSON line (without its newline), in order, not parsed:
        what exact duplicate findings hash (:mod:`akka_optimize.data.findings`)."""
        data = self._data
        for s, e in zip(self._starts, self._ends, strict=True):
            yield data[s:e]
