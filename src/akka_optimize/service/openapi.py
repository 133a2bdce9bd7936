"""The OpenAPI document, corrected to describe what the service does.

FastAPI's generated document lists a 422 ``HTTPValidationError`` the service
never sends (it answers 400 with its own shape), the bearer token as a header
parameter, and no bodies for routes that read the raw request (uploads, plans).
:func:`install` replaces ``app.openapi`` with a version that:

- documents every refusal status (400, 401, 403, 404, 409, 413, 503) of every
  authenticated operation with the one error shape ``ErrorBody``
  (``{"error": {"code", "message", "field"}}``, DESIGN.md "Errors are sentences"),
  or OpenAI's error shape on an endpoint's OpenAI-compatible routes and on OpenAI's own
  fine-tuning routes (:data:`OPENAI_PATHS`);
- declares bearer authentication as a security scheme;
- gives uploads (datasets, bundles, models, images) an ``application/octet-stream``
  body, run plans the :class:`akka_optimize.plan.schema.run.RunPlan` schema, pipeline
  descriptors :class:`akka_optimize.plan.pipeline.PipelinePlan`, and the routes that read
  their JSON by hand the schemas of :mod:`.openapi_bodies` (free JSON values bounded as the
  store holds them);
- says which names the registry's path parameters take (the name grammar of
  :func:`akka_optimize.refs.validate_name`, by :data:`PATH_NAMES`), so that a request the
  document calls valid is not refused for its name (issue 48);
- keeps the success answers the routes declare: a response model per JSON answer
  (:mod:`.schemas`, by :func:`.schemas.answers`; both statuses of a route that picks 200 or
  201 at run time), and bytes with their media type for downloads (:func:`.schemas.binary`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..plan.pipeline import PipelinePlan
from ..plan.schema.run import RunPlan
from ..refs import MAX_NAME_LENGTH, NAME_PATTERN, REF_NAME_PATTERN
from .openapi_bodies import hand_read_bodies, stored_values

ERROR_STATUSES = {
    "400": "The request is malformed or refused; `error.field` names what is wrong.",
    "401": "No bearer token, or one the service does not know.",
    "403": "The token may not do this.",
    "404": "The named object (or route) does not exist.",
    "409": "The request conflicts with stored state.",
    "413": "An upload or a body exceeds the deployment's limit.",
    "502": "A service the request needs (the model hub) cannot be reached.",
    "503": "The service cannot answer now (still starting); retry after `Retry-After`.",
}

ERROR_BODY = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": {"type": "string", "description": "A stable lower-case identifier."},
                "message": {"type": "string", "description": "What is wrong and what to do."},
                "field": {
                    "type": ["string", "null"],
                    "description": "The dotted field path, FILE:line N, or null.",
                },
                "details": {"description": "Extra data, such as every refusal of a plan."},
            },
        }
    },
}

OPENAI_ERROR_BODY = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_BYTES = {"type": "string", "format": "binary"}
_UPLOAD = {"content": {"application/octet-stream": {"schema": _BYTES}}, "required": True}
#: A JSON object body read by hand (OpenAI's fine-tuning routes: OpenAI's own request objects).
_JSON_OBJECT = {"content": {"application/json": {"schema": {"type": "object"}}}, "required": True}

#: Request bodies of routes that read the raw request, by (method, path).
RAW_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/registry/datasets/{namespace}/{name}"): _UPLOAD,
    ("post", "/v1/registry/bundles/{namespace}/{name}"): _UPLOAD,
    ("post", "/v1/registry/models/{namespace}/{name}"): _UPLOAD,
    ("post", "/v1/registry/images"): _UPLOAD,
    ("post", "/v1/registry/adapter-imports/{namespace}/{name}"): _UPLOAD,
    # OpenAI's fine-tuning API (issue 51): OpenAI's own bodies
    ("post", "/v1/files"): {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {"file": _BYTES, "purpose": {"type": "string"}},
                }
            }
        },
        "required": True,
    },
    ("post", "/v1/fine_tuning/jobs"): _JSON_OBJECT,
    ("post", "/v1/fine_tuning/alpha/graders/run"): _JSON_OBJECT,
    ("post", "/v1/fine_tuning/alpha/graders/validate"): _JSON_OBJECT,
    ("post", "/v1/chat/completions"): _JSON_OBJECT,
}
OPENAI_PATHS = ("/v1/files", "/v1/fine_tuning/", "/v1/chat/completions")
"""Paths of OpenAI's own API (issue 51): every refusal there is OpenAI's error shape."""


_NAME = {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}
_REF_NAME = {**_NAME, "pattern": REF_NAME_PATTERN}
#: An alias: a name that cannot read as a version (``vN``, ``latest``:
#: :func:`akka_optimize.registry.aliases.check_alias`).
_ALIAS = {**_NAME, "not": {"pattern": "^([Vv][0-9]+|[Ll][Aa][Tt][Ee][Ss][Tt])$"}}

#: Path parameters that the routes check against the name rule, by parameter name; the
#: registry kinds are the three collections (``_kind`` answers 404 for any other).
PATH_NAMES: dict[str, dict[str, Any]] = {
    "namespace": _NAME,
    "name": _NAME,
    "alias": _ALIAS,
    "kinds": {"type": "string", "enum": ["datasets", "bundles", "models"]},
}
#: Operations whose ``{name}`` is the name part of a reference, selector included
#: (``NAME:v3``, ``NAME:champion``, ``NAME@sha256:…``).
REF_NAMES = {
    ("get", "/v1/registry/{kinds}/{namespace}/{name}"),
    ("get", "/v1/registry/datasets/{namespace}/{name}/object"),
    ("get", "/v1/registry/models/{namespace}/{name}/object"),
    ("get", "/v1/registry/models/{namespace}/{name}/merged"),
}


def _image_filename() -> dict[str, Any]:
    """The ``filename`` of an image push: a last path component with a stem and one of
    :data:`akka_optimize.registry.images.IMAGE_TYPES`' extensions, in any case."""
    from ..registry.images import IMAGE_TYPES  # lazy: sqlalchemy

    exts = "|".join(
        "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in ext[1:])
        for ext in sorted(IMAGE_TYPES)
    )
    return {"type": "string", "pattern": f"^([^/\\n]*/)*[^/\\n]+\\.({exts})$"}


def _name_parameters(method: str, path: str, op: dict[str, Any]) -> None:
    """Give the registry's name parameters of ``op`` their grammar: the path parameters of
    :data:`PATH_NAMES`, an upload's ``alias`` and a listing's ``namespace`` query parameter,
    and an image push's ``filename`` its image extensions."""
    if not path.startswith("/v1/registry/"):
        return
    for p in op.get("parameters", []):
        if (method, path, p["name"]) == ("post", "/v1/registry/images", "filename"):
            p["schema"] = {**_image_filename(), "title": "Filename"}
        if p.get("in") == "query" and p["name"] in ("alias", "namespace"):  # optional names
            name = _ALIAS if p["name"] == "alias" else _NAME
            p["schema"] = {**p["schema"], "anyOf": [name, {"type": "null"}]}
        schema = PATH_NAMES.get(p["name"]) if p.get("in") == "path" else None
        if schema is not None:
            if p["name"] == "name" and (method, path) in REF_NAMES:
                schema = _REF_NAME
            p["schema"] = {**schema, "title": p["schema"].get("title", p["name"])}


def _model_bodies(schemas: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Request bodies of the raw JSON routes that take a descriptor, by (method, path); the
    descriptors' schemas go into ``schemas``."""

    bodies = {}
    for key, model in {
        ("post", "/v1/training/runs"): RunPlan,
        ("post", "/v1/training/pipelines"): PipelinePlan,
    }.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        ref = {"$ref": f"#/components/schemas/{model.__name__}"}
        bodies[key] = {"content": {"application/json": {"schema": ref}}, "required": True}
    return bodies


def _fix_operation(
    method: str, path: str, op: dict[str, Any], bodies: dict[tuple[str, str], Any]
) -> None:
    op["parameters"] = [
        p
        for p in op.get("parameters", [])
        if not (p.get("in") == "header" and p.get("name", "").lower() == "authorization")
    ]
    if not op["parameters"]:
        del op["parameters"]
    _name_parameters(method, path, op)
    if (method, path) in RAW_BODIES:
        op["requestBody"] = RAW_BODIES[(method, path)]
    elif (method, path) in bodies:
        op["requestBody"] = bodies[(method, path)]
    responses = op.setdefault("responses", {})
    responses.pop("422", None)
    if path == "/healthz":
        return
    op["security"] = [{"bearer": []}]
    error: dict[str, Any] = {"$ref": "#/components/schemas/ErrorBody"}
    if "/openai/v1/" in path:  # OpenAI clients read OpenAI's shape; routing errors are ours
        error = {"anyOf": [error, {"$ref": "#/components/schemas/OpenAIErrorBody"}]}
    elif path.startswith(OPENAI_PATHS):  # OpenAI's routes; a token refused is still ours
        error = {"anyOf": [{"$ref": "#/components/schemas/OpenAIErrorBody"}, error]}
    for status, text in ERROR_STATUSES.items():
        responses[status] = {
            "description": text,
            "content": {"application/json": {"schema": error}},
        }


def build(app: FastAPI) -> dict[str, Any]:
    """The corrected OpenAPI document of ``app`` (module docstring)."""
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["ErrorBody"] = ERROR_BODY
    schemas["OpenAIErrorBody"] = OPENAI_ERROR_BODY
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    bodies = {**_model_bodies(schemas), **hand_read_bodies()}
    stored_values(schemas)
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            _fix_operation(method, path, op, bodies)
    return doc


def install(app: FastAPI) -> None:
    """Serve :func:`build`'s document (computed once) as ``app.openapi()``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
