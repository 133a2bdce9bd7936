"""The registry's canonical form of prepared token rows (:mod:`akka_optimize.data.prepared.rows`):
a header line (:func:`header_of`) and one ``{"input_ids", "loss_mask"}`` line per row, the
check that a descriptor's counts are its files' (:func:`check_counts`), and reading the
form back as examples (:func:`examples_from_canonical`).
"""

from __future__ import annotations

import json
from typing import Any

from akka_optimize.data.prepared.descriptor import DESCRIPTOR, FORMAT
from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest


def header_of(desc: dict[str, Any], rows: int, longest: int, supervised: int) -> dict[str, Any]:
    """The first canonical line of a registered prepared dataset: what the tokens mean
    (tokenizer and chat template fingerprints, vocabulary size) and their counts. The
    tokenizer's name is left out, so the same tokens prepared from another copy of the
    same tokenizer are the same version."""
    return {
        "prepared": {
            "format": FORMAT,
            "version": 1,
            "tokenizer": {
                "sha256": desc["tokenizer"]["sha256"],
                "vocabSize": desc["tokenizer"]["vocabSize"],
            },
            "chatTemplate": {"sha256": desc["chatTemplate"]["sha256"]},
            "rows": rows,
            "longestRow": longest,
            "supervisedTokens": supervised,
        }
    }


def check_counts(desc: dict[str, Any], rows: int, longest: int, supervised: int) -> None:
    """The descriptor's counts must be what its files hold (a descriptor that says
    otherwise was written for other files).

    Raises:
        InvalidRequest: ``rows``, ``longestRow`` or ``supervisedTokens`` differ (named).
    """
    for key, have in (("rows", rows), ("longestRow", longest), ("supervisedTokens", supervised)):
        if key in desc and desc[key] != have:
            raise InvalidRequest(
                f"{DESCRIPTOR}: {key} is {desc[key]!r}, but the files hold {have}; "
                "write the folder again with the writer script",
                field=f"{DESCRIPTOR}:{key}",
            )


def examples_from_canonical(data: bytes) -> tuple[dict[str, Any], list[Example]]:
    """The header and the examples of a registered prepared dataset's canonical blob.

    Returns:
        ``(header["prepared"], examples)``: examples numbered 1.. in order, ``weights`` =
        ``loss_mask`` as floats (``input_ids`` ints, one weight per token).
    """
    lines = [line for line in data.splitlines() if line]
    header = json.loads(lines[0])["prepared"]
    examples = []
    for n, line in enumerate(lines[1:], start=1):
        row = json.loads(line)
        examples.append(Example(row["input_ids"], [float(m) for m in row["loss_mask"]], n))
    return header, examples
