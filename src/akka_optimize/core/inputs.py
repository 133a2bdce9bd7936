"""Checks of request values that routes hand to the store as they are.

A JSON body may hold ``"step": "3"``, ``3.5`` or ``2**70``; passed on, each ends
in a failed ``int()`` or an SQL integer overflow (a 500). These checks refuse
them first, with a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest
from ..jsonvalues import MAX_INT
from ..plan.schema.base import whole_decimal

#: Event types every kind of job sends (:func:`akka_optimize.jobs.events.apply_event`);
#: a kind adds its own (``save`` and ``completed`` for supervised runs, jobs/kinds.py).
EVENT_TYPES = (
    "phase",
    "data",
    "metrics",
    "validation",
    "smoke",
    "warning",
    "failed",
    "paused",
    "cancelled",
)
#: Whole-number fields of a worker event; ``step`` is required by ``save``.
EVENT_COUNTS = ("step", "totalSteps", "stateBytes", "adapterBytes")


def whole_number(value: Any, field: str, *, low: int = 0, high: int = MAX_INT) -> int:
    """``value`` when it is a JSON whole number in ``[low, high]`` (``3.0`` is 3, as JSON
    Schema's ``integer`` says: :func:`akka_optimize.plan.schema.base.whole_decimal`).

    Raises:
        InvalidRequest: (``field``) a string, a fraction, a boolean or out of range.
    """
    value = whole_decimal(int, value)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value)[:40]
        raise InvalidRequest(f"{field} must be a whole number, not {shown}.", field=field)
    if not low <= value <= high:
        raise InvalidRequest(
            f"{field} must be between {low} and {high}, not {str(value)[:30]}.", field=field
        )
    return value


def known_event_types() -> tuple[str, ...]:
    """:data:`EVENT_TYPES` and the event types of every registered job kind."""
    from ..jobs.kinds import job_kind, registered_kinds  # lazy: sqlalchemy

    extra = sorted({t for k in registered_kinds() for t in job_kind(k).events})
    return (*EVENT_TYPES, *(t for t in extra if t not in EVENT_TYPES))


def check_worker_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event when its type is known and its counts are whole numbers; else raise.

    Raises:
        InvalidRequest: (``type`` or the count's name) as the sentence says.
    """
    kind = event.get("type")
    known = known_event_types()
    if kind not in known:
        raise InvalidRequest(
            f"type must be one of {', '.join(known)}, not {repr(kind)[:40]}.", field="type"
        )
    if kind == "save" and "step" not in event:
        raise InvalidRequest("A save event needs step.", field="step")
    for key in EVENT_COUNTS:
        if event.get(key) is not None:
            whole_number(event[key], key)
    return event
