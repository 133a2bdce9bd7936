"""OpenAI's grader routes (issue 51 item 3): ``POST /v1/fine_tuning/alpha/graders/validate``
(``{"grader"}`` → the grader, or a 400 naming its first wrong field) and ``…/run``
(``{"grader", "model_sample", "item"?}`` → ``{"reward", "metadata", "sub_rewards", …}``).

Graders are computed by :mod:`akka_optimize.core.openai_ft.grading`; a ``python`` grader's
source runs in the grader sandbox with its limits (:mod:`akka_optimize.evals.sandbox.pool`:
no network, no service files, CPU, memory and wall-clock bounds), a model grader asks the
endpoint serving its ``model`` (a registered model or judge of the caller's projects,
started on demand: :mod:`akka_optimize.core.openai_ft.chat_models`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ....core.auth import Principal
from ....core.context import ServiceContext
from ....core.endpoints.records import manager
from ....core.openai_ft.bundle import python_bundle
from ....core.openai_ft.chat_models import endpoint_for
from ....core.openai_ft.errors import OpenAIError
from ....core.openai_ft.grading import GradeFailure, GraderError, check_grader, grade
from ....errors import AkkaError, InvalidRequest
from ....evals.sandbox.pool import GraderPool
from ....evals.sandbox.records import Limits
from ....jsonvalues import loads
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import answers
from ...schemas.openai_ft import OpenAIGraderRun, OpenAIGraderValidate
from .common import error_response, visible

router = APIRouter(route_class=JsonRoute, prefix="/v1/fine_tuning/alpha/graders", tags=["openai"])
MODEL_WAIT_S = 300
"""The longest a model grader waits for its endpoint to start (seconds)."""


def python_runner(ctx: ServiceContext):  # noqa: ANN201 - a PythonRunner
    """Run one python grader's ``grade(sample, item)`` in the grader sandbox, under the
    deployment's ``graders`` limits (CPU, wall clock, memory)."""

    def run(source: str, sample: dict[str, Any], item: dict[str, Any]) -> float:

        g = ctx.deployment().graders
        limits = Limits(g.cpuSeconds, g.wallSeconds, g.memoryMiB * 1024**2, 1)
        with tempfile.TemporaryDirectory() as tmp:
            folder = python_bundle(source, Path(tmp) / "grader")
            hidden = [ctx.settings.home]
            with GraderPool(folder, "call", "compute_score", limits, hidden) as pool:
                call = {
                    "solution_str": sample["output_text"],
                    "ground_truth": item,
                    "extra_info": {"sample": sample},
                }
                (result,) = pool.score([call])
        if result.error is None and result.score is not None:
            return result.score
        error = result.error or "returned no score"
        if "limit" in error:
            raise GradeFailure("python_grader_server_error", f"timeout or limit: {error}")
        raise GradeFailure("python_grader_runtime_error", error)

    return run


def model_asker(ctx: ServiceContext, principal: Principal, project: str | None):  # noqa: ANN201
    """Ask the endpoint serving a grader's ``model`` (started on demand, waited for)."""

    def ask(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> str:

        deadline = time.monotonic() + MODEL_WAIT_S
        try:
            while True:
                eid, served, ready = endpoint_for(ctx, principal, project, model)
                if ready:
                    break
                if time.monotonic() > deadline:
                    raise GradeFailure(
                        "model_grader_server_error", f"{model} did not start in time"
                    )
                time.sleep(0.5)
        except OpenAIError as exc:
            raise GradeFailure("model_grader_server_error", exc.message) from None
        w = manager(ctx).worker_for(eid)
        body = {
            "model": served,
            "messages": messages,
            "temperature": sampling.get("temperature", 0),
        }
        if sampling.get("max_completions_tokens"):
            body["max_tokens"] = sampling["max_completions_tokens"]
        for k in ("seed", "top_p"):
            if sampling.get(k) is not None:
                body[k] = sampling[k]
        r = httpx.post(w.url + "/v1/chat/completions", json=body, headers=w.headers(), timeout=600)
        if r.status_code != 200:
            raise GradeFailure("model_grader_server_error", r.text[:500])
        return r.json()["choices"][0]["message"]["content"] or ""

    return ask


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = loads(await request.body() or b"null")
    except InvalidRequest as exc:
        raise OpenAIError(exc.message, "body", "invalid_json") from None
    if not isinstance(body, dict):
        raise OpenAIError("The body must be a JSON object with a grader.", "grader")
    return body


def _checked(body: dict[str, Any], allowed: set[str]) -> dict[str, Any]:
    for k in body:
        if k not in allowed:
            raise OpenAIError(
                f"{k} is not a field here ({', '.join(sorted(allowed))}).", k, "unknown_parameter"
            )
    try:
        check_grader(body.get("grader"))
    except GraderError as exc:
        raise OpenAIError(exc.message, exc.param, "invalid_grader") from None
    return body["grader"]


@router.post("/validate", **answers(OpenAIGraderValidate))
async def validate_grader(request: Request, principal: PrincipalDep) -> JSONResponse:
    """Check a grader: the grader back when valid, else a 400 naming its first wrong field.

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """
    try:
        return JSONResponse({"grader": _checked(await _body(request), {"grader"})})
    except OpenAIError as exc:
        return error_response(exc)


@router.post("/run", **answers(OpenAIGraderRun))
async def run_grader(request: Request, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    """Grade ``model_sample`` against ``item``: errors of the grader (formula, python
    runtime, timeout, model reply) are flags of ``metadata.errors``, the reward then 0.

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """
    try:
        body = await _body(request)
        g = _checked(body, {"grader", "model_sample", "item"})
        sample = body.get("model_sample")
        if not isinstance(sample, str):
            raise OpenAIError(
                "model_sample is required: the model's answer as text.", "model_sample"
            )
        item = body.get("item")
        if item is not None and not isinstance(item, dict):
            raise OpenAIError("item must be an object (the row's reference fields).", "item")
        asker = model_asker(ctx, principal, visible(principal, request))
        out = await run_in_threadpool(grade, g, sample, item, python_runner(ctx), asker)
    except (OpenAIError, AkkaError) as exc:
        return error_response(exc)
    return JSONResponse(out)
