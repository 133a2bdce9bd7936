"""Fuzzing in CI (issue 14): schemathesis over the service's own OpenAPI document.

Every operation gets a few generated requests, schema-valid and schema-invalid,
sent with an admin token to the real app in process (real SQLite store). The run
is deterministic (``derandomize``) and bounded (examples per operation, no
shrinking), so it takes well under a minute. It holds that no answer is a 5xx,
that each status is documented, and that each answer — every 4xx included —
matches its documented schema (the error shape ``{"error": {code, message,
field}}``) and content type.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service_app import in_process  # noqa: E402

#: Operations whose documented parameters carry the service's own rules (issue 48 item 9:
#: the registry's name grammar and collections), so that no schema-valid request is refused.
NAME_OPERATIONS = {
    ("GET", "/v1/registry/{kinds}"),
    ("GET", "/v1/registry/{kinds}/{namespace}/{name}"),
    ("GET", "/v1/registry/{kinds}/{namespace}/{name}/versions"),
    ("GET", "/v1/registry/datasets/{namespace}/{name}/object"),
    ("GET", "/v1/registry/models/{namespace}/{name}/object"),
    ("GET", "/v1/registry/models/{namespace}/{name}/merged"),
    ("PUT", "/v1/registry/{kinds}/{namespace}/{name}/aliases/{alias}"),  # and its version
    # uploads: their names and alias only; the bytes' content is no document's business
    ("POST", "/v1/registry/datasets/{namespace}/{name}"),
    ("POST", "/v1/registry/bundles/{namespace}/{name}"),
    ("POST", "/v1/registry/models/{namespace}/{name}"),
    ("POST", "/v1/registry/images"),  # its filename's extension
}

EXAMPLES_PER_OPERATION = 6
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Operations left out, with the reason: they start work outside the request.
SKIPPED = {
    # Selecting a catalog model starts a download in the background.
    ("POST", "/v1/training/base-models"),
    # Candidates are listed from the model hub, which tests do not reach (502 offline).
    ("GET", "/v1/training/base-models/candidates"),
}


def _bounded(examples: int) -> settings:
    """Hypothesis settings of a bounded, deterministic run: ``examples`` generated cases per
    operation, no shrinking, no example database."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def _fuzz(operation, mode, headers: dict[str, str], failures: list[str]) -> int:
    calls: list[object] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @_bounded(EXAMPLES_PER_OPERATION)
    def run(case) -> None:
        calls.append(case)
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as exc:  # collected: one run reports them all
            failures.append(f"{operation.label} [{mode.value}]: {str(exc)[:600]}")

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (no parameters, no body)
        assert mode is GenerationMode.NEGATIVE, operation.label
    return len(calls)


def test_the_openapi_document_fuzzes_clean(tmp_path, monkeypatch) -> None:
    with in_process(tmp_path / "h", monkeypatch) as svc:
        svc.call("POST", "/v1/training/projects", json={"name": "p"})
        schema = schemathesis.openapi.from_asgi("/openapi.json", svc.app, headers=svc.headers)
        failures: list[str] = []
        count = calls = 0
        for result in schema.get_all_operations():
            operation = result.ok()
            if (operation.method.upper(), operation.path) in SKIPPED:
                continue
            count += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                calls += _fuzz(operation, mode, svc.headers, failures)
        assert count > 40 and calls > 5 * count
        assert not failures, "\n".join(failures)


def test_schema_valid_names_are_accepted(tmp_path, monkeypatch) -> None:
    """Issue 48 item 9: on the operations of :data:`NAME_OPERATIONS`, a request the document
    calls valid (generated from it) is never refused for its parameters: no 400 but an
    upload's refused bytes (field ``file`` or ``FILE:line N``), no 5xx; a name that names
    nothing stored is a 404."""
    with in_process(tmp_path / "h", monkeypatch) as svc:
        svc.call("POST", "/v1/training/projects", json={"name": "p"})
        schema = schemathesis.openapi.from_asgi("/openapi.json", svc.app, headers=svc.headers)
        refused: list[str] = []
        seen = set()
        for result in schema.get_all_operations():
            operation = result.ok()
            if (operation.method.upper(), operation.path) not in NAME_OPERATIONS:
                continue
            seen.add((operation.method.upper(), operation.path))

            @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
            @_bounded(25)
            def run(case) -> None:
                response = case.call(headers=svc.headers)
                error = response.json().get("error") or {}
                field = error.get("field") or ""
                # the bytes refused; an image's name is refused under field file too
                upload = field == "file" or ":line " in field
                upload = upload and "is not an image" not in error.get("message", "")
                if (response.status_code == 400 and not upload) or response.status_code >= 500:
                    refused.append(
                        f"{case.operation.label} {case.path_parameters}: {response.text}"
                    )

            run()
        assert seen == NAME_OPERATIONS
        assert not refused, "\n".join(refused[:10])
