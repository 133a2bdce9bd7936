"""Reading a JSONL file of rows the way JSON reads it, one line at a time.

- Lines end at ``\\n`` only (a ``\\r`` before it is JSON whitespace). U+2028, U+2029,
  U+0085 and other Unicode line breaks are characters inside a line, as they are for
  JSON (RFC 8259), so a string holding one is not split.
- ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON; a number too large for a
  double (``1e400``) is refused too. The row is refused naming its line.
- The file is read as a stream: memory holds one line and the error list, never the
  file (issue 14 item 3), so the caller can write each row out as it comes.

Every line is checked, so one refusal names all bad lines up to ``MAX_LISTED_ERRORS``
(behaviours.md 9). Blank lines are skipped (line numbers still count them).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..jsonvalues import MAX_DEPTH, find_problem
from . import strictjson
from .rows import MAX_LISTED_ERRORS, DataFileError, RowError, parse_row


def decode_line(raw: str, number: int) -> Any:
    """The JSON value of one line, strictly (module docstring).

    Raises:
        RowError: the line is not JSON, or holds NaN/Infinity or an out-of-range number.
    """
    try:
        value = strictjson.loads(raw)
    except json.JSONDecodeError as exc:
        raise RowError(number, "", f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise RowError(number, "", f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise RowError(number, "", str(exc)) from None
    if (problem := find_problem(value)) is not None:
        raise RowError(number, problem[0], problem[1])
    return value


def _lines(stream: Iterable[bytes], source: str) -> Iterator[tuple[int, str]]:
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise DataFileError(
                f"{source} is not UTF-8 text: line {number}: byte {raw[exc.start]:#x} "
                "cannot be decoded",
                field=f"{source}:line {number}",
            ) from None
        if text.strip():
            yield number, text


def read_rows(stream: Iterable[bytes], source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, normalised row)`` for each good row of a binary JSONL stream.

    Bad lines are collected; once the stream ends, the generator raises
    :class:`DataFileError` listing them (so a caller stores nothing until the generator
    is exhausted). ``stream`` yields lines split on ``b"\\n"``, as a binary file does.

    Raises:
        DataFileError: a line is not UTF-8 (at once), some lines are bad, or the file
            holds no row.
    """
    errors: list[RowError] = []
    bad = good = 0
    for number, text in _lines(stream, source):
        try:
            row = parse_row(decode_line(text, number), number)
        except RowError as err:
            bad += 1
            if len(errors) < MAX_LISTED_ERRORS:
                errors.append(err)
            continue
        good += 1
        if not errors:
            yield number, row
    if errors:
        more = f"\n… and {bad - len(errors)} more bad lines" if bad > len(errors) else ""
        raise DataFileError(
            f"{source} has {bad} bad line{'s' if bad != 1 else ''}:\n"
            + "\n".join(e.message for e in errors)
            + more,
            field=f"{source}:line {errors[0].line}",
            details=[{"line": e.line, "field": e.field, "message": e.reason} for e in errors],
        )
    if not good:
        raise DataFileError(f"{source} holds no rows", field=source)


def iter_jsonl_rows(data: bytes, source: str) -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_rows` over bytes in memory, as a list of ``(line number, row)``."""
    return list(read_rows(io.BytesIO(data), source))


def validate_jsonl_bytes(data: bytes, source: str) -> list[dict[str, Any]]:
    """Parse and validate a whole JSONL file of rows held in memory.

    Args:
        data: the file's bytes (UTF-8).
        source: the file name used in the error's field, e.g. ``"train.jsonl"``.

    Returns:
        The normalised rows, in file order.

    Raises:
        DataFileError: some line is not JSON or not a valid row, or the file holds no row.
    """
    return [row for _, row in read_rows(io.BytesIO(data), source)]
