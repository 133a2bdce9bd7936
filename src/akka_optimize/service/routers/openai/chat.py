"""``POST /v1/chat/completions`` on the service itself (issue 51 item 4): OpenAI's chat
route where ``model`` names what to answer with, not an endpoint.

``model`` is a fine-tuned model (``ft:BASE:SUFFIX:RUN``), one of its checkpoints
(``…:ckpt-step-N``: the snapshot's adapter, registered as a version of the job's model on
first use) or any registry reference of a model version the caller sees. The request goes
to a READY endpoint of the model's project serving that version. When none is ready the
service starts one (or asks a stopped one to start) and answers 503 with ``Retry-After``
(the openai SDK retries a 503 by itself) until it is; when quota or capacity can never
admit one it refuses with a sentence (``quota_exceeded``). Which endpoint answers is
:mod:`akka_optimize.core.openai_ft.chat_models`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ....core.openai_ft.chat_models import endpoint_for
from ....core.openai_ft.errors import OpenAIError
from ....errors import AkkaError
from ....jsonvalues import loads
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import ChatCompletion
from ..endpoints.routes import forward_to_worker
from .common import error_response, visible

router = APIRouter(route_class=JsonRoute, tags=["openai"])
RETRY_AFTER_S = 2
"""Seconds a 503 asks the client to wait while the model's endpoint starts."""


def starting(model: str) -> OpenAIError:
    """The 503 answered while ``model``'s endpoint starts."""
    return OpenAIError(
        f"The model {model} is loading on its endpoint; retry in {RETRY_AFTER_S} s.",
        "model",
        "model_loading",
        503,
        {"Retry-After": str(RETRY_AFTER_S)},
    )


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses={
        200: {"model": ChatCompletion, "description": "The chat completion (or SSE chunks)."}
    },
)
async def chat_completions(request: Request, ctx: CtxDep, principal: PrincipalDep) -> Any:
    """A chat completion by the model ``model`` names (module docstring).

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """

    raw = await request.body()
    try:
        body = loads(raw or b"null")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise OpenAIError(
                "model is required: a fine-tuned model or a registry reference.",
                "model",
                "missing_required_parameter",
            )
        model = body["model"]
        project = visible(principal, request)
        eid, served, ready = await run_in_threadpool(endpoint_for, ctx, principal, project, model)
        if not ready:
            raise starting(model)
    except (OpenAIError, AkkaError) as exc:
        return error_response(exc)
    body["model"] = served
    return await forward_to_worker(eid, request, ctx, principal, "/v1/chat/completions", body)
