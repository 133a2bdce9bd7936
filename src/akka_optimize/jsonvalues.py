"""JSON the service can store: decoded, then checked before anything uses it.

Python's ``json`` accepts things that later break a store or an encoder: ``1e400``
decodes to infinity, ``"\\ud800"`` to a lone UTF-16 surrogate that UTF-8 cannot
encode, whole numbers of any size (SQL integers hold 64 bits), and nesting deep
enough to exhaust the interpreter's recursion. :func:`check_value` refuses each with
a sentence naming the field path (``config.hyperparams.learningRate``,
``messages[0].content``); :func:`loads` decodes and checks in one step. Used by
the service for every JSON body and by the dataset reader for every row.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import InvalidRequest

#: Deepest nesting of arrays and objects accepted (a run plan needs about 5).
MAX_DEPTH = 64
#: Largest magnitude of a whole number (a signed 64-bit SQL integer).
MAX_INT = 2**63 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _problem(value: Any) -> str | None:
    """Why one scalar cannot be stored, or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            return f"the number {str(value)[:24]}… is larger than 2^63-1, the largest stored"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return "the number is outside the range of a 64-bit float (or is NaN/Infinity)"
        return None
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        if m:
            return (
                f"the text holds a lone UTF-16 surrogate (\\u{ord(m.group()):04x}) at "
                f"character {m.start()}, which is not a character; send valid Unicode"
            )
    return None


def find_problem(value: Any, root: str = "") -> tuple[str, str] | None:
    """The first ``(field path, reason)`` in ``value`` that cannot be stored, or None.

    Walks iteratively (no recursion), so any depth is safe to check.
    """
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                return path or "body", f"the value is nested deeper than {MAX_DEPTH} levels"
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = []
            for key, child in items:
                sub = _join(path, key)
                if isinstance(key, str) and (why := _problem(key)):
                    return sub, f"the key {why.removeprefix('the text ')}"
                children.append((child, sub, depth + 1))
            stack.extend(reversed(children))
        elif why := _problem(node):
            return path or "body", why
    return None


def check_value(value: Any, root: str = "", *, where: str = "The request body") -> Any:
    """Return ``value`` when every part can be stored; else raise.

    Raises:
        InvalidRequest: (field = the offending path, or ``root``/``body``) a
            non-finite float, a whole number beyond 64 bits, a lone surrogate or
            nesting deeper than :data:`MAX_DEPTH`.
    """
    found = find_problem(value, root)
    if found is not None:
        field, why = found
        raise InvalidRequest(f"{where} is refused at {field}: {why}.", field=field)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; use a finite number")


def loads(raw: bytes | str, *, field: str = "body", where: str = "The request body") -> Any:
    """Decode ``raw`` as strict JSON and :func:`check_value` it.

    Raises:
        InvalidRequest: (``field``) not UTF-8, not JSON (line and column given),
            NaN/Infinity, nested too deep; or (the offending path) as :func:`check_value`.
    """
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidRequest(
            f"{where} is nested deeper than {MAX_DEPTH} levels.", field=field
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"{where} is not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}.",
            field=field,
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"{where} is not valid JSON: {exc}.", field=field) from None
    return check_value(value, "" if field == "body" else field, where=where)
