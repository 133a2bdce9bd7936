"""JSON as RFC 8259 defines it: ``NaN``, ``Infinity`` and numbers past a double refused.

Python's :func:`json.loads` accepts ``NaN`` and ``Infinity`` and turns ``1e400`` into
``inf``; a row holding one would make the stored canonical file no longer JSON (issue 14
item 7). :func:`loads` raises :class:`ValueError` with a sentence instead.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; write a finite number or a string")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_float)


def loads(text: str) -> Any:
    """Decode ``text`` strictly.

    Raises:
        json.JSONDecodeError: not JSON (``msg``, ``pos``, ``colno`` say where).
        ValueError: NaN/Infinity, or a number too large for a double.
    """
    return _DECODER.decode(text)
