"""The grader worker's answers: a grader's return value (veRL's convention) as a result.

:func:`convert` turns a number or a dict with a numeric ``score`` into ``{"score",
"details", "error"}``; :func:`last_line` names an exception in one line; :func:`_error` is
an error result. Standard library only: it runs in a worker started by path
(``python -I -S -B``).
"""

import json
import math
import numbers
import traceback

TRACEBACK_CHARS = 4000
"""The most characters of a grader's traceback kept in an error result's details."""
DETAILS_BYTES = 64 * 1024
"""The most bytes of JSON a result's details may take; larger details are left out."""
ERROR_CHARS = 1000
"""The most characters of an error's sentence."""


def last_line(exc: BaseException) -> str:
    """``Type: message`` on one line, as the last line of a traceback shows it."""
    lines = traceback.format_exception_only(type(exc), exc)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and 0 < len(notes) < len(lines):
        lines = lines[: -len(notes)]  # notes (add_note) follow the Type: message line
    text = " ".join((lines[-1] if lines else repr(exc)).split())
    return text[:ERROR_CHARS]


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, complex)


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:80] + "…"
    return f"{text} ({type(value).__name__})"


def _json_value(value: object) -> tuple[bool, object]:
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError, OverflowError):
        return False, None


def convert(value: object) -> dict:
    """veRL's return convention → ``{"score", "details", "error"}``.

    A number (``bool`` and ``int`` too; ``numbers.Real``) or a dict with a numeric
    ``score``; the dict's other keys whose values are JSON are kept as ``details``
    (others are left out, listed under ``_omitted``). NaN and infinities are errors.
    """
    details: dict = {}
    if isinstance(value, dict):
        if "score" not in value or not _is_number(value["score"]):
            if "score" in value:
                return _error(
                    f"returned a dict whose 'score' is {_describe(value['score'])}, not a number"
                )
            keys = ", ".join(sorted(str(k) for k in value)[:10]) or "none"
            return _error(f"returned a dict without a numeric 'score' (keys: {keys})")
        raw = value["score"]
        omitted = []
        for key, item in value.items():
            if key == "score":
                continue
            ok, clean = _json_value(item)
            if isinstance(key, str) and ok:
                details[key] = clean
            else:
                omitted.append(str(key))
        if omitted:
            details["_omitted"] = f"not JSON, left out: {', '.join(sorted(omitted)[:10])}"
        size = len(json.dumps(details))
        if size > DETAILS_BYTES:
            details = {
                "_omitted": f"the details took {size:,} bytes of JSON; the limit is {DETAILS_BYTES:,}"
            }
    elif _is_number(value):
        raw = value
    else:
        return _error(f"returned {_describe(value)}, not a number or a dict with a numeric score")
    try:
        score = float(raw)
    except (TypeError, ValueError, OverflowError) as exc:
        return _error(f"returned a score that is not a float: {last_line(exc)}")
    if not math.isfinite(score):
        return _error(f"returned {score!r}, not a finite number")
    return {"score": score, "details": details, "error": None}


def _error(sentence: str, details: dict | None = None) -> dict:
    return {"score": None, "details": details or {}, "error": sentence[:ERROR_CHARS]}
