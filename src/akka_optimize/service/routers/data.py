"""Routes of the data resource: ``POST /v1/training/data/preview``.

The preview shows rows as the base model's own chat template renders them, with the spans
the loss covers marked (issue 5 item 6), using a plan's loss policy when one is given.

Body (JSON)::

    {"baseModel": "HuggingFaceTB/SmolLM2-135M-Instruct",   # or taken from plan.baseModel
     "jsonl": "<file text>" | "rows": [row, ...] | "dataset": "NS/NAME[:tag]",
     "project": "triage",            # resolves a bare dataset NAME
     "plan": {...} | "loss": {...},  # the loss policy: plan.config.loss, else loss, else defaults
     "rowCount": 5}                  # how many rows, from the start (1–100)

Answer: ``{"baseModel", "source", "loss": {...}, "rows": [{"row", "segments":
[{"text", "supervised"}], "tokens", "supervised_tokens", "warnings"} | {"row", "error"}]}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request

from ...catalog.cache import load_tokenizer, tokenizer_dir
from ...core.access import rules as access
from ...core.auth import Principal
from ...core.context import ServiceContext
from ...data.jsonl import iter_jsonl_rows
from ...data.policy import LossPolicy
from ...errors import InvalidRequest
from ...jsonvalues import loads
from ...plan.schema.base import whole_decimal
from ...registry import dataset_rows_view
from ..connected import while_connected
from ..deps import CtxDep, PrincipalDep
from ..routing import JsonRoute
from ..schemas import Preview, answers

router = APIRouter(route_class=JsonRoute)
MAX_PREVIEW_ROWS = 100


def _policy(body: dict[str, Any]) -> Any:

    plan = body.get("plan")
    if plan is not None:
        if not isinstance(plan, dict):
            raise InvalidRequest("plan must be a run plan object", field="plan")
        loss = (plan.get("config") or {}).get("loss")
        return LossPolicy.from_config(loss if isinstance(loss, dict) else None)
    loss = body.get("loss")
    if loss is not None and not isinstance(loss, dict):
        raise InvalidRequest('loss must be an object like {"assistantTurns": "last"}', field="loss")
    return LossPolicy.from_config(loss)


def _rows(
    ctx: ServiceContext, session: Any, body: dict[str, Any], principal: Principal | None
) -> tuple[str, list[int], Sequence[dict]]:

    sources = [k for k in ("jsonl", "rows", "dataset") if body.get(k) is not None]
    if len(sources) != 1:
        raise InvalidRequest("give exactly one of jsonl, rows or dataset", field="body")
    if "jsonl" in sources:
        if not isinstance(body["jsonl"], str):
            raise InvalidRequest("jsonl must be the text of a JSONL file", field="jsonl")
        name = str(body.get("filename") or "rows.jsonl")
        pairs = iter_jsonl_rows(body["jsonl"].encode(), name)
        return name, [n for n, _ in pairs], [r for _, r in pairs]
    if "rows" in sources:
        if not isinstance(body["rows"], list):
            raise InvalidRequest("rows must be a list of rows", field="rows")
        data = "\n".join(json.dumps(r) for r in body["rows"]).encode()
        pairs = iter_jsonl_rows(data, "rows")
        return "rows", [n for n, _ in pairs], [r for _, r in pairs]

    version = access.resolve(
        principal, session, "dataset", str(body["dataset"]), body.get("project"), field="dataset"
    )
    rows = dataset_rows_view(ctx.store, version)
    return version.pinned, list(range(1, len(rows) + 1)), rows


def preview_request(
    ctx: ServiceContext, body: Any, principal: Principal | None = None
) -> dict[str, Any]:
    """Answer one preview request (blocking: may load a tokenizer); a ``dataset`` resolves
    among the artifacts ``principal`` sees (:mod:`..access`)."""
    from ...data.preview import preview  # lazy: numpy

    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object", field="body")
    plan = body.get("plan") if isinstance(body.get("plan"), dict) else {}
    base = body.get("baseModel") or plan.get("baseModel")
    if not isinstance(base, str) or not base:
        raise InvalidRequest(
            "name the base model whose chat template renders the rows", field="baseModel"
        )
    count = whole_decimal(int, body.get("rowCount", 5))
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_ROWS:
        raise InvalidRequest(
            f"rowCount must be an integer from 1 to {MAX_PREVIEW_ROWS}", field="rowCount"
        )
    policy = _policy(body)
    with ctx.db.session() as session:
        source, numbers, rows = _rows(ctx, session, body, principal)
        path = tokenizer_dir(session, ctx.settings, base)
    tokenizer = load_tokenizer(path)
    out = preview(tokenizer, rows, policy, count, numbers)
    return {
        "baseModel": base,
        "source": source,
        "loss": {
            "assistantTurns": policy.assistant_turns,
            "trainOnToolCalls": policy.train_on_tool_calls,
            "trainOnToolResults": policy.train_on_tool_results,
        },
        "rows": out,
    }


@router.post("/v1/training/data/preview", **answers(Preview))
async def preview_route(request: Request, ctx: CtxDep, principal: PrincipalDep) -> dict[str, Any]:
    """Rows rendered by the base model's chat template, supervised spans marked. The rows
    (``jsonl``, ``rows`` or a registered ``dataset``) are checked as a dataset upload's rows
    are, and the loss policy as a plan's ``config.loss``: a refusal names the row and field.
    A ``dataset`` without a namespace resolves in ``project`` (400 without one)."""
    raw = await request.body()
    body = loads(raw or b"null")
    return await while_connected(
        request, "data preview", lambda: preview_request(ctx, body, principal)
    )
