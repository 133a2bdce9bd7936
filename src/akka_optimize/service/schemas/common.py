"""What every response schema shares, and how a route declares its answer.

The views the service answers are built as dicts (:mod:`akka_optimize.jobs.views`,
:mod:`akka_optimize.evals.views`, …); the models of this package describe them for
the OpenAPI document (issue 14 item 9) without re-validating each answer: a route names
its model with :func:`answers` (``responses={status: {"model": …}}`` and no
``response_model``), so the body stays exactly what the view built. A model lists every
key a view writes; a key present only in some cases has a default (it is then not
``required``). Extra keys are allowed by the schema, so a newer service's answer still
validates for an older client; the tests check the other way round (no undocumented key).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: JSON Schema of a downloaded file's bytes.
BINARY = {"type": "string", "format": "binary"}


class View(BaseModel):
    """Base of the response models: camelCase keys as the service writes them."""

    model_config = ConfigDict(populate_by_name=True)


def answers(
    model: type[BaseModel],
    status: int = 200,
    description: str | None = None,
    also: dict[int, tuple[type[BaseModel], str]] | None = None,
) -> dict[str, Any]:
    """Decorator arguments that document ``model`` as the ``status`` answer of a route
    whose view builds that shape itself, without validating the answer against it.

    ``also`` maps further statuses (a route that picks its status at run time) to
    ``(model, description)``. Use as ``@router.get(path, **answers(RunView))``.
    """
    out: dict[int, Any] = {status: {"model": model}}
    if description:
        out[status]["description"] = description
    for code, (other, text) in (also or {}).items():
        out[code] = {"model": other, "description": text}
    return {"response_model": None, "responses": out}


def binary(description: str, *media_types: str) -> dict[str, Any]:
    """Decorator arguments for a download: the 200 answer's bytes under each media type,
    as ``{"type": "string", "format": "binary"}``."""
    from fastapi.responses import StreamingResponse

    content = {m: {"schema": BINARY} for m in media_types}
    return {
        "response_class": StreamingResponse,
        "responses": {200: {"description": description, "content": content}},
    }


def iso_time(description: str, *, required: bool = True) -> Any:
    """A ``Field`` for an ISO 8601 timestamp (a string; null when not yet reached)."""
    text = f"{description} (ISO 8601, UTC), or null."
    return Field(description=text) if required else Field(None, description=text)


class ProjectFields(View):
    """The project a record belongs to (F057: text shows the name, JSON keeps the ID)."""

    project: str = Field(description="The project's name (as before projectName existed).")
    projectId: str | None = Field(description="The project's ID; null when it is gone.")
    projectName: str = Field(description="The project's name.")


class Progress(View):
    """How far an evaluation, comparison or curation is."""

    completed: int = Field(description="Examples (rows) done.")
    total: int = Field(description="Examples (rows) to do; 0 until known.")


class Refusal(View):
    """One refusal of a plan or a start: what is wrong, where, and the limit it breaks."""

    code: str | None = Field(None, description="A stable lower-case identifier.")
    field: str | None = Field(None, description="The dotted path of the refused field.")
    message: str = Field(description="What is wrong and what to do.")
    status: int | None = Field(None, description="The HTTP status a start would answer.")
    value: Any = Field(None, description="The refused value (an excerpt), or null.")
    limit: Any = Field(None, description="The limit the value breaks, or null.")
