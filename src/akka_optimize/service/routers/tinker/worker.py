"""The poll of a Tinker training client's worker: ``POST
/v1/training/runs/RUN/attempts/N/tinker/next`` (that attempt's token only).

The body carries the answer to the worker's previous item (``request_id``, ``result``,
``error``), or on the first poll ``ready``; the reply is the next item in ``seq_id`` order
(``{"item": …}``), ``{"item": null}`` after about 25 s without one, or ``{"end":
sentence}`` when the client's session finished or the service no longer knows the client,
``{"end", "cancel": true}`` after ``training runs cancel``, and ``{"end", "save": true}``
when the client's session sent no SDK heartbeat for ``service.tinkerHeartbeatSeconds``
(a client killed without ``close()``; the worker saves its state, then ends). The poll
checks both about every :data:`CHECK_SECONDS` while it waits, so a cancel or a lost
client ends the run within that bound (after the call the worker is in, if any).
Sampler weights a worker saved are registered here as model versions, before the future
resolves with their ``tinker://`` path.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path
from starlette.concurrency import run_in_threadpool

from ....core.attempts import check_running_attempt
from ....core.context import ServiceContext
from ....core.tinker_clients import run_marks, worker_answer_result
from ....tinker.broker import POLL_SECONDS, Broker, Model, broker_of
from ...deps import CtxDep
from ...routing import JsonRoute

router = APIRouter(route_class=JsonRoute, prefix="/v1/training")
MAX_INT = 2**31 - 1
CHECK_SECONDS = 1.0
"""How often a waiting poll looks for a cancel and for a silent session."""


async def _take_answer(ctx: ServiceContext, b: Broker, m: Model, answer: dict[str, Any]) -> None:
    if answer.get("ready"):
        m.ready = True
        m.info["vocab"] = answer["ready"].get("vocab")
        b.resolve(m.info["create_future"], m.info["ready"], None)
        return
    rid = answer.get("request_id")
    item = m.taken.get(rid) if rid else None
    if item is None:
        return
    try:
        answer["name"] = item["body"].get("name")
        answer["sampling_session_id"] = item["body"].get("sampling_session_id")
        answer["ttl"] = item["body"].get("ttl_seconds")
        result = await run_in_threadpool(worker_answer_result, ctx, m, item["op"], answer)
        b.finish_item(m, rid, result, answer.get("error"))
    except Exception as exc:  # registration failed: the future says so
        b.finish_item(m, rid, None, f"The save could not be registered: {exc}")


async def _stop(ctx: ServiceContext, b: Broker, m: Model) -> dict[str, Any] | None:
    """The ``end`` answer when ``m``'s run was cancelled or its session went silent
    (``m`` is dropped and its pending futures fail with the sentence), else None."""
    control, bound = await run_in_threadpool(run_marks, ctx, m.run_id)
    if control == "cancel":
        b.drop(m, f"Run {m.run_id} was cancelled (`training runs cancel`).")
        return {"end": "the run was cancelled (`training runs cancel`)", "cancel": True}
    silent = b.silent_for(m)
    if silent is not None and silent > bound:
        ended = f"the client sent no heartbeat for {bound:g} s (service.tinkerHeartbeatSeconds)"
        b.drop(m, f"Run {m.run_id}: {ended}.")
        return {"end": ended, "save": True}
    return None


@router.post("/runs/{run_id}/attempts/{number}/tinker/next")
async def tinker_next(
    run_id: str,
    number: Annotated[int, Path(ge=1, le=MAX_INT, description="The attempt number.")],
    ctx: CtxDep,
    body: Annotated[dict[str, Any], Body()],
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """A Tinker worker's answer to its last item and its wait for the next one."""
    await run_in_threadpool(
        check_running_attempt, ctx, run_id, number, (authorization or "")[7:].strip()
    )
    b = broker_of(ctx)
    m = b.model_of(b.by_run.get(run_id, ""))
    if m is None:
        return {
            "end": "the service restarted or forgot this training client; create a new one "
            "(its saved checkpoints stay registered)."
        }
    await _take_answer(ctx, b, m, body)
    wait = body.get("wait")
    wait = min(max(float(wait), 1.0), POLL_SECONDS) if isinstance(wait, int | float) else None
    deadline = time.monotonic() + (wait or POLL_SECONDS)
    while True:
        stop = await _stop(ctx, b, m)
        if stop is not None:
            return stop
        left = deadline - time.monotonic()
        item = await b.next_item(m, min(CHECK_SECONDS, max(left, 0.01)))
        if item is not None or left <= CHECK_SECONDS:
            break
    if item is not None and item["op"] == "end":
        b.by_run.pop(run_id, None)
        b.models.pop(m.model_id, None)
        return {"end": "the client's session finished"}
    return {"item": item}
