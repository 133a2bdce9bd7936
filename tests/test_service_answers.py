"""The OpenAPI document describes the service's answers (issue 14 item 9).

:func:`test_every_success_answer_has_a_schema_a_client_can_use` walks ``/openapi.json``:
each 2xx JSON answer names an object with properties (never a bare ``{"type": "object"}``
or a free-form dict), every other 2xx media type is a string (``format: binary`` for
downloads), and every field of those schemas has a description. :func:`test_every_route_answers_what_the_document_says` calls each route with
valid inputs on a service holding one of every kind of object (the world of
:mod:`test_access`, plus a paused run and a served endpoint) and validates each body
against its route's schema from ``/openapi.json`` with ``jsonschema``, strictly: an
object schema with properties admits no other key, so a key the document does not name
fails too. :data:`NOT_CALLED` lists the routes no call reaches, with the reason.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from answers_check import assert_matches, schema_errors, strict
from helpers import hold_at, release, wait_held
from jobs.jobs_helpers import TINY, wait_state
from minifield.minifield_kit import recipe_doc, write_rows
from test_access import (
    OAI_GRADER,
    PNG,
    TINY_MODEL,
    World,
    _comparison,
    _curation,
    _evaluation,
    _pipeline,
    _plan,
    _tar,
    app_routes,
    recipe_root,
)
from test_access import world as world  # noqa: F401 (the module's fixture)

PACKED = {"schema_version": "12.0.0", "implementation": "hf-causal-lm-v1", "computation": "12.0.0"}
"""The packed SFT computation a claim advertises (the second claim finds nothing)."""

#: Routes no call below reaches, with the reason.
NOT_CALLED = {
    ("GET", "/v1/training/base-models/candidates"): "lists the model hub, which tests do not reach",
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/events"): "a worker's token only; its "
    "answer is validated by FastAPI (response_model=WorkerEventAnswer)",
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge"): "a worker's token only; "
    "answers the EndpointView that GET /v1/training/endpoints/{endpoint_id} is checked against",
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge/chat/completions"): "a worker's "
    "token only; answers the ChatCompletion that the endpoint's chat route is checked against",
    ("GET", "/openapi.json"): "the document itself",
    ("POST", "/v1/registry/models/{namespace}/{name}/from-tinker"): "needs a checkpoint a live "
    "Tinker client saved (a training worker); tests/tinker/test_tinker_checkpoints_out.py "
    "registers one through this route and serves it",
    **{
        (m, p): "an admin token needs the OpenAI-Project header there, which this walk does not "
        "send, and the world's job is cancelled; the answer is validated by the openai SDK's own "
        "FileObject / FineTuningJob in tests/openai_ft/test_openai_ft_control.py"
        for m, p in (
            ("POST", "/v1/files"),
            ("POST", "/v1/fine_tuning/jobs"),
            ("POST", "/v1/fine_tuning/jobs/{job_id}/cancel"),
            ("POST", "/v1/fine_tuning/jobs/{job_id}/pause"),
            ("POST", "/v1/fine_tuning/jobs/{job_id}/resume"),
        )
    },
    ("GET", "/docs"): "HTML",
    ("GET", "/redoc"): "HTML",
}


# -- the walk --------------------------------------------------------------------------
def _useless(schema: dict[str, Any], components: dict[str, Any], media: str) -> str | None:
    """Why ``schema`` tells a client nothing (after one ``$ref``), or None when it does."""
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    if media != "application/json":
        return None if schema.get("type") == "string" else f"{media} is not a string: {schema}"
    if not schema:
        return "no schema"
    if schema.get("type") != "object" or not schema.get("properties"):
        return f"a bare or free-form object: {schema}"
    return None


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"].rsplit("/", 1)[1]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _reachable(doc: dict[str, Any]) -> set[str]:
    """The component schemas the success answers use, directly or inside one another."""
    todo = [
        name
        for ops in doc["paths"].values()
        for op in ops.values()
        for status, answer in op["responses"].items()
        if status.startswith("2")
        for name in _refs(answer)
    ]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_refs(doc["components"]["schemas"][name]))
    return seen


def test_every_success_answer_has_a_schema_a_client_can_use(tmp_path, monkeypatch) -> None:
    from akka_optimize.service import create_app
    from akka_optimize.settings import Settings

    monkeypatch.setenv("AKKA_OPTIMIZE_HOME", str(tmp_path / "h"))
    doc = create_app(Settings.from_env()).openapi()
    components = doc["components"]["schemas"]
    gaps, answers = [], 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, answer in op["responses"].items():
                if not status.startswith("2"):
                    continue
                assert answer.get("content"), f"{method.upper()} {path} {status}: no content"
                for media, body in answer["content"].items():
                    answers += 1
                    why = _useless(body.get("schema") or {}, components, media)
                    if why:
                        gaps.append(f"{method.upper()} {path} {status} {media}: {why}")
    assert answers > 70
    assert not gaps, "\n".join(gaps)
    names = _reachable(doc)
    undescribed = [f"{n}.{k}" for n in sorted(names)
                   for k, v in components[n].get("properties", {}).items() if not v.get("description")]  # fmt: skip
    assert len(names) > 60 and not undescribed, f"fields without a description: {undescribed}"
    objects = doc["paths"]["/v1/registry/models/{namespace}/{name}/object"]["get"]
    assert objects["responses"]["200"]["content"] == {
        "application/x-tar": {"schema": {"type": "string", "format": "binary"}}
    }


# -- the calls -------------------------------------------------------------------------
class Checker:
    """Validates answers against the document and records the routes it saw."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.components = strict(copy.deepcopy(doc["components"]))
        self.seen: set[tuple[str, str]] = set()

    def check(self, method: str, template: str, r: httpx.Response) -> Any:
        """The answer's JSON body (or None for bytes), once it matches the document."""
        where = f"{method} {template}"
        assert r.status_code < 300, (where, r.status_code, r.text[:800])
        answer = self.doc["paths"][template][method.lower()]["responses"].get(str(r.status_code))
        assert answer, f"{where} answered {r.status_code}, which the document does not list"
        media = r.headers.get("content-type", "").split(";")[0].strip()
        content = answer["content"]
        assert media in content, f"{where} answered {media}, the document says {sorted(content)}"
        self.seen.add((method, template))
        schema = content[media]["schema"]
        if media != "application/json":
            assert schema["type"] == "string" and r.content, where
            return None
        body = r.json()
        errors = schema_errors({**schema, "components": self.components}, body)
        assert not errors, f"{where}: the answer breaks its schema:\n" + "\n".join(errors[:8])
        return body


def _wait(w: World, path: str, ok: Any, what: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = w.ok(w.admin, "GET", path)
        if ok(body):
            return body
        assert time.monotonic() < deadline, f"{what} within {timeout} s: {body}"
        time.sleep(0.5)


ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def checked(world: World, tiny_model_dir, tmp_path_factory) -> Iterator[tuple[World, Checker]]:
    """The world, plus run ``b_run2`` (the first run's plan again: paused at update 1,
    resumed, cancelled), with the answers that made it checked; the first evaluation and
    comparison finished and the endpoint READY; and a minifield recipe (``b_recipe``)."""
    w, svc = world, world.svc
    rows = write_rows(recipe_root(tmp_path_factory) / "data.jsonl")
    recipe = recipe_doc(tiny_model_dir, max_steps=1) | {"data": {"path": str(rows)}}
    w.ids["b_recipe"] = json.dumps(recipe)
    doc = w.ok(w.admin, "GET", "/openapi.json")
    c = Checker(doc)
    run = "/v1/training/runs/{run_id}"
    hold_at(svc, "step-1")
    try:
        r = w.call(w.admin, "POST", "/v1/training/runs", json=_plan("b", "train"))
        w.ids["b_run2"] = c.check("POST", "/v1/training/runs", r)["id"]
        wait_held(svc)
        path = f"/v1/training/runs/{w.ids['b_run2']}"
        c.check("POST", run + "/pause", w.call(w.admin, "POST", path + "/pause"))
    finally:
        release(svc)
    wait_state(svc, w.ids["b_run2"], ("PAUSED",))
    c.check("POST", run + "/resume", w.call(w.admin, "POST", path + "/resume", json={}))
    c.check("POST", run + "/cancel", w.call(w.admin, "POST", path + "/cancel"))
    for kind in ("evaluations", "comparisons"):
        key = f"b_{kind[:-1]}"
        _wait(w, f"/v1/training/{kind}/{w.ids[key]}", lambda b: b["state"] in ENDED, key)
    ep = f"/v1/training/endpoints/{w.ids['b_endpoint']}"
    _wait(w, ep, lambda b: b["state"] == "READY", "the endpoint READY")
    yield w, c


def _cases(w: World) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(method, documented path, request path, request arguments), in the order called."""
    i = w.ids
    reg, tr = "/v1/registry", "/v1/training"
    run, snap = f"{tr}/runs/{i['b_run']}", "{run_id}/snapshots/{name}"
    lr = "config.hyperparams.optimizer.learningRate"
    ep = f"{tr}/endpoints/{i['b_endpoint']}"
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    row = b'{"prompt": "1+1?", "completion": "2"}\n'
    settings = {"dataset": "b/train", "grader": "bundle:b/grader#g", "autoEvaluate": False}
    return [
        ("GET", "/healthz", "/healthz", {}),
        ("GET", f"{tr}/info", f"{tr}/info", {}),
        ("GET", f"{tr}/capacity", f"{tr}/capacity", {}),
        ("GET", f"{tr}/capacity", f"{tr}/capacity", {"params": {"project": "b"}}),
        ("GET", f"{reg}/info", f"{reg}/info", {}),
        ("POST", f"{reg}/datasets/{{namespace}}/{{name}}", f"{reg}/datasets/b/more", {"content": row}),
        ("POST", f"{reg}/datasets/{{namespace}}/{{name}}", f"{reg}/datasets/b/more", {"content": row}),
        ("POST", f"{reg}/bundles/{{namespace}}/{{name}}", f"{reg}/bundles/b/more",
         {"content": _tar({"g.py": b"1\n"})}),
        ("POST", f"{reg}/images", f"{reg}/images", {"params": {"filename": "y.png"},
                                                    "content": PNG + b" again"}),
        ("GET", f"{reg}/images/{{digest}}", f"{reg}/images/{i['b_image']}", {}),
        ("POST", f"{reg}/adapter-imports/{{namespace}}/{{name}}", f"{reg}/adapter-imports/b/x",
         {"params": {"baseModel": TINY}, "content": _tar({"adapter_config.json": b"{}"})}),
        ("GET", f"{reg}/adapter-imports/{{import_id}}", f"{reg}/adapter-imports/{i['b_import']}",
         {}),
        *[("GET", f"{reg}/{{kinds}}", f"{reg}/{k}", {}) for k in ("datasets", "models", "bundles")],
        *[("GET", f"{reg}/{{kinds}}/{{namespace}}/{{name}}", f"{reg}/{ref}", {})
          for ref in ("datasets/b/train", "datasets/b/pics", "models/b/tiny-smollm2",
                      "bundles/b/scoring", f"models/{TINY_MODEL}")],
        *[("GET", f"{reg}/{{kinds}}/{{namespace}}/{{name}}/versions", f"{reg}/{ref}/versions", {})
          for ref in ("datasets/b/train", "models/b/tiny-smollm2", "bundles/b/scoring")],
        ("GET", f"{reg}/datasets/{{namespace}}/{{name}}/object", f"{reg}/datasets/b/train/object", {}),
        ("GET", f"{reg}/datasets/{{namespace}}/{{name}}/object", f"{reg}/datasets/b/pics/object", {}),
        ("GET", f"{reg}/models/{{namespace}}/{{name}}/object",
         f"{reg}/models/b/tiny-smollm2/object", {"keep": "adapter"}),
        ("POST", f"{reg}/models/{{namespace}}/{{name}}", f"{reg}/models/b/copy",
         {"params": {"base_model": TINY}, "content": "adapter"}),
        ("GET", f"{reg}/models/{{namespace}}/{{name}}/merged", f"{reg}/models/b/tiny-smollm2/merged", {}),
        ("PUT", f"{reg}/{{kinds}}/{{namespace}}/{{name}}/aliases/{{alias}}",
         f"{reg}/datasets/b/train/aliases/champion", {"json": {"version": "v1"}}),
        ("PUT", f"{reg}/{{kinds}}/{{namespace}}/{{name}}/annotations",
         f"{reg}/models/b/tiny-smollm2/annotations", {"json": {"annotations": {"owner": "b"}}}),
        ("POST", f"{tr}/projects", f"{tr}/projects", {"json": {"name": "c"}}),
        ("GET", f"{tr}/projects", f"{tr}/projects", {}),
        ("GET", f"{tr}/projects/{{project}}", f"{tr}/projects/b", {}),
        ("PUT", f"{tr}/projects/{{project}}/evaluation", f"{tr}/projects/b/evaluation", {"json": settings}),
        ("GET", f"{tr}/projects/{{project}}/scores", f"{tr}/projects/b/scores", {}),
        ("GET", f"{tr}/base-models", f"{tr}/base-models", {}),
        ("GET", f"{tr}/base-models", f"{tr}/base-models", {"params": {"all": "true"}}),
        ("POST", f"{tr}/base-models", f"{tr}/base-models", {"json": {"repository": TINY}}),
        ("GET", f"{tr}/base-models/{{ref}}", f"{tr}/base-models/{TINY}", {}),
        ("POST", f"{tr}/data/preview", f"{tr}/data/preview",
         {"json": {"dataset": "b/train", "baseModel": TINY, "project": "b", "rowCount": 2}}),
        ("POST", f"{tr}/runs", f"{tr}/runs", {"params": {"dryRun": "true"}, "json": _plan("b", "train")}),
        ("GET", f"{tr}/runs", f"{tr}/runs", {}),
        ("GET", f"{tr}/runs/{{run_id}}", run, {}),
        ("GET", f"{tr}/runs/{{run_id}}", run, {"params": {"settings": "true"}}),
        ("GET", f"{tr}/runs/{{run_id}}", f"{tr}/runs/{i['b_run2']}", {}),
        ("POST", f"{tr}/recipes", f"{tr}/recipes",
         {"json": {"project": "b", "recipe": json.loads(i["b_recipe"])}, "keep": "b_recipe_run"}),
        ("POST", f"{tr}/recipes/claim", f"{tr}/recipes/claim", {"json": {"accepts": [PACKED]}}),
        ("POST", f"{tr}/recipes/claim", f"{tr}/recipes/claim", {"json": {"accepts": [PACKED]}}),
        ("GET", f"{tr}/runs/{{run_id}}", f"{tr}/runs/{{b_recipe_run}}", {}),
        ("GET", f"{tr}/runs/{{run_id}}/samples", f"{run}/samples", {}),
        ("GET", f"{tr}/runs/{{run_id}}/metrics", f"{run}/metrics", {}),
        ("GET", f"{tr}/runs/{{run_id}}/grafana", f"{run}/grafana",
         {"params": {"platformProject": "ops"}}),
        ("GET", "/metrics", "/metrics", {}),
        ("GET", f"{tr}/runs/{{run_id}}/snapshots", f"{run}/snapshots", {}),
        ("GET", f"{tr}/runs/{snap}", f"{run}/snapshots/step-2", {}),
        ("POST", f"{tr}/runs/{snap}/register", f"{run}/snapshots/step-1/register",
         {"json": {"modelName": "early"}}),
        ("GET", f"{tr}/runs/{{run_id}}/failure", f"{run}/failure", {}),
        ("GET", f"{tr}/runs/{{run_id}}/compare", f"{run}/compare",
         {"params": {"baseline": i["b_run2"], "window": 1}}),
        ("POST", f"{tr}/runs/{{run_id}}/sweep", f"{run}/sweep",
         {"json": {"snapshot": "step-2", "steps": 1, "grid": {lr: [0.002]}}, "keep": "sweep"}),
        ("GET", f"{tr}/runs/{{run_id}}/tree", f"{run}/tree", {}),
        ("GET", f"{tr}/runs/{{run_id}}/ancestry", f"{run}/ancestry", {}),
        ("POST", f"{tr}/evaluations", f"{tr}/evaluations", {"json": _evaluation("b"), "keep": "ev"}),
        ("POST", f"{tr}/evaluations/{{evaluation_id}}/cancel", f"{tr}/evaluations/{{ev}}/cancel", {}),
        ("GET", f"{tr}/evaluations", f"{tr}/evaluations", {}),
        ("GET", f"{tr}/evaluations/{{evaluation_id}}", f"{tr}/evaluations/{i['b_evaluation']}",
         {"params": {"examples": "true"}}),
        ("POST", f"{tr}/comparisons", f"{tr}/comparisons", {"json": _comparison("b"), "keep": "cmp"}),
        ("POST", f"{tr}/comparisons/{{comparison_id}}/cancel", f"{tr}/comparisons/{{cmp}}/cancel", {}),
        ("GET", f"{tr}/comparisons", f"{tr}/comparisons", {}),
        ("GET", f"{tr}/comparisons/{{comparison_id}}", f"{tr}/comparisons/{i['b_comparison']}",
         {"params": {"examples": "true"}}),
        ("POST", f"{tr}/curations", f"{tr}/curations", {"json": _curation("b"), "keep": "cu"}),
        ("POST", f"{tr}/curations/{{curation_id}}/cancel", f"{tr}/curations/{{cu}}/cancel", {}),
        ("GET", f"{tr}/curations", f"{tr}/curations", {}),
        ("GET", f"{tr}/curations/{{curation_id}}", f"{tr}/curations/{i['b_curation']}", {}),
        ("POST", f"{tr}/pipelines", f"{tr}/pipelines", {"params": {"dryRun": "true"}, "json": _pipeline("b")}),
        ("POST", f"{tr}/pipelines", f"{tr}/pipelines", {"json": _pipeline("b"), "keep": "pipe"}),
        ("POST", f"{tr}/pipelines/{{pipeline_id}}/cancel", f"{tr}/pipelines/{{pipe}}/cancel", {}),
        ("POST", f"{tr}/pipelines/{{pipeline_id}}/resume", f"{tr}/pipelines/{{pipe}}/resume", {}),
        ("POST", f"{tr}/pipelines/{{pipeline_id}}/cancel", f"{tr}/pipelines/{{pipe}}/cancel", {}),
        ("GET", f"{tr}/pipelines", f"{tr}/pipelines", {}),
        ("GET", f"{tr}/pipelines/{{pipeline_id}}", f"{tr}/pipelines/{i['b_pipeline']}", {}),
        ("GET", f"{tr}/endpoints/info", f"{tr}/endpoints/info", {}),
        ("GET", f"{tr}/endpoints", f"{tr}/endpoints", {}),
        ("GET", f"{tr}/endpoints/{{endpoint_id}}", ep, {}),
        ("GET", f"{tr}/endpoints/{{endpoint_id}}/openai/v1/models", f"{ep}/openai/v1/models", {}),
        ("POST", f"{tr}/endpoints/{{endpoint_id}}/openai/v1/chat/completions",
         f"{ep}/openai/v1/chat/completions", {"json": chat}),
        ("POST", f"{tr}/endpoints/{{endpoint_id}}/openai/v1/completions",
         f"{ep}/openai/v1/completions",
         {"json": {"prompt": "Hi", "max_tokens": 1, "echo": True, "logprobs": 1}}),
        ("POST", f"{tr}/endpoints", f"{tr}/endpoints", {"json": {"model": "b/copy:v1"}, "keep": "ep"}),
        ("DELETE", f"{tr}/endpoints/{{endpoint_id}}/models/{{ref}}",
         f"{tr}/endpoints/{{ep}}/models/b/copy:v1", {}),
        ("DELETE", f"{tr}/endpoints/{{endpoint_id}}", f"{tr}/endpoints/{{ep}}", {}),
        # OpenAI's fine-tuning API (issue 51) on b's file and (cancelled) job
        ("GET", "/v1/files", "/v1/files", {}),
        ("GET", "/v1/files/{file_id}", f"/v1/files/{i['b_file']}", {}),
        ("GET", "/v1/files/{file_id}/content", f"/v1/files/{i['b_file']}/content", {}),
        ("GET", "/v1/fine_tuning/jobs", "/v1/fine_tuning/jobs", {}),
        ("GET", "/v1/fine_tuning/jobs/{job_id}", f"/v1/fine_tuning/jobs/{i['b_job']}", {}),
        ("GET", "/v1/fine_tuning/jobs/{job_id}/events", f"/v1/fine_tuning/jobs/{i['b_job']}/events", {}),
        ("GET", "/v1/fine_tuning/jobs/{job_id}/checkpoints",
         f"/v1/fine_tuning/jobs/{i['b_job']}/checkpoints", {}),
        ("POST", "/v1/fine_tuning/alpha/graders/validate", "/v1/fine_tuning/alpha/graders/validate",
         {"json": {"grader": OAI_GRADER}}),
        ("POST", "/v1/fine_tuning/alpha/graders/run", "/v1/fine_tuning/alpha/graders/run",
         {"json": {"grader": OAI_GRADER, "model_sample": "x", "item": {}}}),
        ("POST", "/v1/chat/completions", "/v1/chat/completions",
         {"json": {**chat, "model": "b/tiny-smollm2:v1"}}),
        ("DELETE", "/v1/files/{file_id}", f"/v1/files/{i['b_file']}", {}),
    ]  # fmt: skip


def test_every_route_answers_what_the_document_says(checked: tuple[World, Checker]) -> None:
    w, c = checked
    kept: dict[str, Any] = {}
    for method, template, path, kw in _cases(w):
        kw = dict(kw)
        keep = kw.pop("keep", None)
        if isinstance(kw.get("content"), str):
            kw["content"] = kept[kw["content"]]
        path = path.format(**{k: v for k, v in kept.items() if isinstance(v, str)})
        r = w.call(w.admin, method, path, **kw)
        body = c.check(method, template, r)
        if keep == "adapter":
            kept[keep] = r.content
        elif keep == "sweep":  # its branches need not train
            for point in body["points"]:
                w.ok(w.admin, "POST", f"/v1/training/runs/{point['run']['id']}/cancel")
        elif keep:
            kept[keep] = body["id"]
    documented = {(m.upper(), p) for p, ops in c.doc["paths"].items() for m in ops}
    missed = documented - c.seen - set(NOT_CALLED)
    assert not missed, f"routes no call reached: {sorted(missed)}"
    assert set(NOT_CALLED) <= {(m, p.replace(":path", "")) for m, p in app_routes()}


# -- records the calls above do not produce --------------------------------------------
SUMMARY = {"mean": 0.5, "stderr": 0.1, "count": 4, "scored": 4, "errors": 0, "errorShare": 0.0}
PAIRED = {"wins": 1, "losses": 0, "ties": 3, "pairs": 4, "errors": 0, "meanDifference": 0.25,
          "ci95": [-0.1, 0.6]}  # fmt: skip
SWEEP = {
    "kind": "sweep",
    "source": "src1",
    "snapshot": "step-2",
    "branches": [{"run": "br1", "point": {"lr": 0.002}}],
    "leftOut": [{"run": "br2", "point": {"lr": 0.1}, "state": "FAILED"}],
    "sides": [
        {"modelId": "b/m:v1@sha256:aa", "model": "b/m:v1"},
        {"run": "br1", "point": {"lr": 0.002}, "modelId": "b/m:v2@sha256:bb", "model": "b/m:v2"},
    ],
}


def test_views_of_reinforcement_sweep_and_curation_records_match_their_schemas(
    tmp_path,
) -> None:
    """A reinforcement run (its reward and judge fields), a sweep comparison (``sweep``,
    ``fan``, ``leftOut``), a finished curation and evaluation: each view, as its route
    answers it, against the model the document names for that route."""
    from akka_optimize.db.base import Database
    from akka_optimize.db.migrate import upgrade
    from akka_optimize.db.models.jobs import Run
    from akka_optimize.db.models.projects import Project
    from akka_optimize.evals.curation.kind import curation_view
    from akka_optimize.evals.views import comparison_view, evaluation_view
    from akka_optimize.jobs.views import run_view
    from akka_optimize.service.schemas import ComparisonView, CurationView, EvaluationView, RunView

    url = f"sqlite:///{tmp_path / 'state.db'}"
    upgrade(url)
    db = Database(url)
    grader = {"spec": "model:b/judge:v1", "bundle": None, "judge": "b/judge:v1@sha256:cc"}
    records = {
        "rl": (run_view, RunView, {"grader": grader, "graderInstructions": "Score 0 to 1.",
               "instructionsSource": "the judge's annotations"},
               {"rewardStart": 0.1, "rewardFinal": 0.4, "judgeEndpoint": "ep1", "totalTokens": 90}),
        "compare": (comparison_view, ComparisonView, SWEEP,
                    {"baseline": SUMMARY, "fan": [{**SUMMARY, "vsSource": PAIRED}]}),
        "curate": (curation_view, CurationView, {"grader": grader, "keep": {"topShare": 0.5}},
                   {"count": 4, "scored": 4, "errors": 0, "kept": 2, "mean": 0.5, "stderr": 0.1,
                    "dataset": "b/kept:v1@sha256:dd", "judgeDataset": "b/judged:v1@sha256:ee"}),
        "eval": (evaluation_view, EvaluationView, {"grader": grader, "modelId": "b/m:v1"},
                 dict(SUMMARY)),
    }  # fmt: skip
    try:
        with db.session() as s:
            s.add(Project(id="p-b", name="b"))
            for method, (view, model, resolved, results) in records.items():
                run = Run(id=f"{method}1", project="b", method=method, state="SUCCEEDED",
                          plan={}, resolved=resolved, results=results, config_hash="0" * 64,
                          base_model="b/base:v1", dataset="b/train:v1", model_name="m",
                          device_kind="cpu", gpus=0)  # fmt: skip
                s.add(run)
                s.flush()
                body = view(s, run)
                assert_matches(model, body)
                assert body["id"] == run.id and body["projectId"] == "p-b"
            sweep = comparison_view(s, s.get(Run, "compare1"))
            assert [f["run"] for f in sweep["fan"]] == ["br1"] and sweep["leftOut"][0][
                "run"
            ] == "br2"
    finally:
        db.dispose()
