"""Checks of request values that routes hand to the store as they are.

A JSON body may hold ``"step": "3"``, ``3.5`` or ``2**70``; passed on, each ends
in a failed ``int()`` or an SQL integer overflow (a 500). These checks refuse
them first, with a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest
from ..jsonvalues import MAX_INT

#: Event types a worker sends (:func:`akka_optimize.jobs.events.apply_event`).
EVENT_TYPES = (
    "phase",
    "data",
    "metrics",
    "validation",
    "save",
    "completed",
    "failed",
    "paused",
    "cancelled",
)
#: Whole-number fields of a worker event; ``step`` is required by ``save``.
EVENT_COUNTS = ("step", "totalSteps", "stateBytes", "adapterBytes")


def whole_number(value: Any, field: str, *, low: int = 0, high: int = MAX_INT) -> int:
    """``value`` when it is a JSON whole number in ``[low, high]``.

    Raises:
        InvalidRequest: (``field``) a string, a fraction, a boolean or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value)[:40]
        raise InvalidRequest(f"{field} must be a whole number, not {shown}.", field=field)
    if not low <= value <= high:
        raise InvalidRequest(
            f"{field} must be between {low} and {high}, not {str(value)[:30]}.", field=field
        )
    return value


def check_worker_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event when its type is known and its counts are whole numbers; else raise.

    Raises:
        InvalidRequest: (``type`` or the count's name) as the sentence says.
    """
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        raise InvalidRequest(
            f"type must be one of {', '.join(EVENT_TYPES)}, not {repr(kind)[:40]}.", field="type"
        )
    if kind == "save" and "step" not in event:
        raise InvalidRequest("A save event needs step.", field="step")
    for key in EVENT_COUNTS:
        if event.get(key) is not None:
            whole_number(event[key], key)
    return event
