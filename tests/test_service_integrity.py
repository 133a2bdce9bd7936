"""Issue 14 items 2, 4, 5, 6 and 9: refused requests store nothing, no 5xx for bad
input, ID prefixes are prefixes, no server-side file reads, and the small things
(405 Allow, ASCII names, private files, read timeouts, an honest OpenAPI document)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import io
import json
import re
import socket
import stat
import tarfile
import threading
import zipfile

import pytest
import sqlalchemy.event
import sqlalchemy.orm
from sqlalchemy.exc import OperationalError

from akka_optimize.core.inputs import check_worker_event
from akka_optimize.db.models.jobs import Run
from akka_optimize.errors import InvalidRequest
from akka_optimize.jobs.records import get_run
from pg import postgres_server
from service_app import in_process

ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
JSONL = (json.dumps(ROW) + "\n").encode()
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))
BIG = str(2**63)


def _error(r, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message", "field"} and err["message"]
    return err


@pytest.fixture(params=["sqlite", "postgresql"])
def svc(request, tmp_path, monkeypatch):
    if request.param == "postgresql":
        with postgres_server() as url, in_process(tmp_path / "h", monkeypatch, url) as s:
            yield s
    else:
        with in_process(tmp_path / "h", monkeypatch) as s:
            yield s


@pytest.fixture
def lite(tmp_path, monkeypatch):
    with in_process(tmp_path / "h", monkeypatch) as s:
        yield s


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- item 4: a refused request stores nothing; commits come before the answer ---------


def test_refused_registrations_store_nothing(svc) -> None:
    bad_alias = svc.call("POST", "/v1/registry/datasets/p/d?alias=v1", content=JSONL)
    assert _error(bad_alias)["field"] == "alias"
    assert _error(svc.call("GET", "/v1/registry/datasets/p/d"), 404)
    bundle = _tar_gz({"grader.py": b"print(1)\n"})
    assert _error(svc.call("POST", "/v1/registry/bundles/p/b?alias=latest", content=bundle))
    assert _error(svc.call("GET", "/v1/registry/bundles/p/b"), 404)
    ok = svc.call("POST", "/v1/registry/datasets/p/d?alias=good", content=JSONL)
    assert ok.status_code in (200, 201), ok.text
    assert svc.call("GET", "/v1/registry/datasets/p/d:good").json()["version"] in (1, "v1")
    assert _error(svc.call("POST", "/v1/registry/datasets/p/d?alias=v2", content=JSONL + JSONL))
    versions = svc.call("GET", "/v1/registry/datasets/p/d/versions").json()
    assert [str(v["version"]).removeprefix("v") for v in versions["items"]] == ["1"]


MISSING = "0123456789abcdef"
PLAN = {
    "kind": "run",
    "project": "p",
    "baseModel": "akka-optimize/tiny-smollm2",  # never selected here: refused at start
    "config": {"dataset": "p/d", "method": "sft"},
}
#: One refused request per route that writes, by (method, route path): each is answered
#: 4xx and leaves every table and every blob as it was. A registration whose alias is
#: refused used to leave its blobs behind (the alias was checked after they were stored).
REFUSED_WRITES: dict[tuple[str, str], list[dict]] = {
    ("POST", "/v1/registry/datasets/{namespace}/{name}"): [
        {"path": "/v1/registry/datasets/p/d?alias=v1", "content": JSONL + JSONL},
        {"path": "/v1/registry/datasets/p/e", "content": b'{"messages": 5}\n'},
    ],
    ("POST", "/v1/registry/bundles/{namespace}/{name}"): [
        {"path": "/v1/registry/bundles/p/b?alias=latest", "content": b"not a tar"},
    ],
    ("POST", "/v1/registry/models/{namespace}/{name}"): [
        {"path": "/v1/registry/models/p/m?base_model=x/y", "content": b"not a tar"},
    ],
    ("POST", "/v1/registry/adapter-imports/{namespace}/{name}"): [
        {"path": "/v1/registry/adapter-imports/p/m?baseModel=x/y", "content": b"not a tar"},
    ],
    ("POST", "/v1/registry/models/{namespace}/{name}/from-tinker"): [
        {"path": "/v1/registry/models/p/m/from-tinker", "json": {"path": "tinker://x/weights/s"}},
        {
            "path": "/v1/registry/models/p/m/from-tinker",
            "json": {"path": "tinker://sess-0:train:0/sampler_weights/none"},
        },
    ],
    ("POST", "/v1/registry/images"): [{"path": "/v1/registry/images?filename=a.png"}],
    ("PUT", "/v1/registry/{kinds}/{namespace}/{name}/aliases/{alias}"): [
        {"path": "/v1/registry/datasets/p/d/aliases/best", "json": {"version": 9}},
        {"path": "/v1/registry/datasets/p/d/aliases/v3", "json": {"version": 1}},
    ],
    ("PUT", "/v1/registry/{kinds}/{namespace}/{name}/annotations"): [
        {"path": "/v1/registry/datasets/p/d:v9/annotations", "json": {"note": "x"}},
    ],
    ("POST", "/v1/training/projects"): [{"json": {"name": "Not A Name!"}}],
    ("PUT", "/v1/training/projects/{project}/evaluation"): [
        {"path": "/v1/training/projects/p/evaluation", "json": {"nope": 1}},
    ],
    ("POST", "/v1/training/base-models"): [{"json": {"repository": "no/such-model"}}],
    ("POST", "/v1/training/data/preview"): [{"json": {"dataset": "p/missing"}}],
    ("POST", "/v1/training/runs"): [
        {"json": PLAN},
        {"path": "/v1/training/runs?dryRun=true", "json": {**PLAN, "config": {}}},
    ],
    ("POST", "/v1/training/runs/{run_id}/sweep"): [{"json": {}}],
    ("POST", "/v1/training/runs/{run_id}/snapshots/{name}/register"): [{"json": {}}],
    ("POST", "/v1/training/runs/{run_id}/cancel"): [{}],
    ("POST", "/v1/training/runs/{run_id}/pause"): [{}],
    ("POST", "/v1/training/runs/{run_id}/resume"): [{}],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/events"): [
        {"json": {"type": "progress", "step": 1}},
    ],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge"): [{}],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge/chat/completions"): [
        {"json": {"messages": []}},
    ],
    ("POST", "/v1/training/endpoints"): [{"json": {"project": "p", "model": "p/none:v1"}}],
    ("DELETE", "/v1/training/endpoints/{endpoint_id}"): [{}],
    ("DELETE", "/v1/training/endpoints/{endpoint_id}/models/{ref:path}"): [{}],
    ("POST", "/v1/training/endpoints/{endpoint_id}/openai/v1/chat/completions"): [
        {"json": {"model": "x", "messages": [{"role": "user", "content": "hi"}]}},
    ],
    ("POST", "/v1/training/endpoints/{endpoint_id}/openai/v1/completions"): [
        {"json": {"model": "x", "prompt": "hi"}},
    ],
    ("POST", "/v1/training/evaluations"): [
        {"json": {"project": "p", "dataset": "p/d", "modelId": "p/none:v1"}},
    ],
    ("POST", "/v1/training/evaluations/{evaluation_id}/cancel"): [{}],
    ("POST", "/v1/training/comparisons"): [
        {"json": {"project": "p", "dataset": "p/d", "models": ["p/a:v1", "p/b:v1"]}},
    ],
    ("POST", "/v1/training/comparisons/{comparison_id}/cancel"): [{}],
    ("POST", "/v1/training/curations"): [
        {"json": {"project": "p", "source": "p/d", "dataset": "p/kept", "judge": "model:x"}},
    ],
    ("POST", "/v1/training/curations/{curation_id}/cancel"): [{}],
    ("POST", "/v1/training/pipelines"): [
        {
            "json": {
                "kind": "pipeline",
                "project": "p",
                "submissionId": "s",
                "stages": [
                    {"kind": "evaluate", "name": "e", "dataset": "p/d", "modelId": "p/none:v1"},
                ],
            }
        },
    ],
    ("POST", "/v1/training/pipelines/{pipeline_id}/cancel"): [{}],
    ("POST", "/v1/training/pipelines/{pipeline_id}/resume"): [{}],
    ("POST", "/v1/training/recipes"): [
        {"json": {"project": "p", "recipe": {"schema_version": "9.9.9"}}},
        {"json": {"project": "p", "recipe": []}},
    ],
    ("POST", "/v1/training/recipes/claim"): [{"json": {"accepts": "everything"}}],
    # OpenAI's fine-tuning API (issue 51)
    ("POST", "/v1/files"): [{"content": b"not a multipart body"}],
    ("DELETE", "/v1/files/{file_id}"): [{"path": "/v1/files/file-p-v9"}],
    ("POST", "/v1/fine_tuning/jobs"): [
        {"json": {"model": "akka-optimize/tiny-smollm2", "training_file": "file-p-v1"}},
    ],
    ("POST", "/v1/fine_tuning/jobs/{job_id}/cancel"): [{}],
    ("POST", "/v1/fine_tuning/jobs/{job_id}/pause"): [{}],
    ("POST", "/v1/fine_tuning/jobs/{job_id}/resume"): [{}],
    ("POST", "/v1/fine_tuning/alpha/graders/validate"): [{"json": {"grader": {"type": "x"}}}],
    ("POST", "/v1/fine_tuning/alpha/graders/run"): [{"json": {"grader": {}, "model_sample": ""}}],
    ("POST", "/v1/chat/completions"): [{"json": {"model": "p/none:v1", "messages": []}}],
}


def _filled(route: str) -> str:
    """``route`` with every path parameter given a value naming nothing stored."""
    import re

    fill = {"namespace": "p", "name": "step-1", "number": "1", "ref:path": "p/none:v1"}
    return re.sub(r"\{([^}]+)\}", lambda m: fill.get(m.group(1), MISSING), route)


def _everything(svc) -> tuple[dict[str, list], list[str]]:
    """Every row of every table (sorted) and every blob's path under the home."""
    from akka_optimize.db.base import Base

    tables = {}
    with svc.app.state.ctx.db.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            tables[table.name] = sorted(map(repr, conn.execute(table.select()).all()))
    blobs = sorted(str(p.relative_to(svc.home)) for p in svc.home.rglob("*") if p.is_file())
    return tables, [b for b in blobs if not b.startswith(("state.db", "logs/"))]


def test_every_route_that_writes_has_a_refused_request() -> None:
    from akka_optimize.service.routers import ROUTERS

    writes = {
        (m, r.path)
        for mod in ROUTERS
        for r in mod.router.routes
        for m in r.methods
        if m in ("POST", "PUT", "PATCH", "DELETE")
    }
    assert set(REFUSED_WRITES) == writes


def test_a_refused_write_stores_nothing(svc) -> None:
    """Each route's refused request (:data:`REFUSED_WRITES`), on SQLite and PostgreSQL."""
    assert svc.call("POST", "/v1/training/projects", json={"name": "p"}).status_code == 201
    ok = svc.call("POST", "/v1/registry/datasets/p/d", content=JSONL)
    assert ok.status_code == 201, ok.text
    before = _everything(svc)
    for (method, route), cases in REFUSED_WRITES.items():
        for case in cases:
            kw = {k: case[k] for k in ("json", "content") if k in case}
            r = svc.call(method, case.get("path", _filled(route)), **kw)
            assert 400 <= r.status_code < 500, (method, route, r.status_code, r.text)
            assert _everything(svc) == before, (method, route, r.text)


def test_a_commit_that_fails_is_the_answer(svc, monkeypatch) -> None:
    real = sqlalchemy.orm.Session.commit

    def failing(self):
        if self.info.get("wrote"):  # only the session that inserted the project
            raise OperationalError("COMMIT", {}, Exception("disk I/O error"))
        return real(self)

    def mark(session, _flush_context):
        session.info["wrote"] = True

    sqlalchemy.event.listen(sqlalchemy.orm.Session, "after_flush", mark)
    monkeypatch.setattr(sqlalchemy.orm.Session, "commit", failing)
    r = svc.call("POST", "/v1/training/projects", json={"name": "never"})
    assert _error(r, 503)["code"] == "unavailable"
    monkeypatch.setattr(sqlalchemy.orm.Session, "commit", real)
    sqlalchemy.event.remove(sqlalchemy.orm.Session, "after_flush", mark)
    assert _error(svc.call("GET", "/v1/training/projects/never"), 404)


def test_concurrent_creation_of_one_project_is_one_201_and_409s(svc) -> None:
    def create(_: int) -> int:
        return svc.call("POST", "/v1/training/projects", json={"name": "race"}).status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        codes = sorted(pool.map(create, range(6)))
    assert codes == [201] + [409] * 5


# -- item 5: no 5xx for bad input --------------------------------------------------------

DEEP = "[" * 2000 + "]" * 2000
BAD_INPUTS = [
    ("deep JSON", "POST", "/v1/training/projects", {"content": DEEP, "json_type": True}, "body"),
    ("deep plan", "POST", "/v1/training/runs", {"content": DEEP}, "body"),
    (
        "1e400 in a plan",
        "POST",
        "/v1/training/runs",
        {"content": '{"kind": "run", "config": {"hyperparams": {"learningRate": 1e400}}}'},
        "config.hyperparams.learningRate",
    ),
    (
        "lone surrogate in a body",
        "POST",
        "/v1/training/projects",
        {"content": '{"name": "\\ud800"}', "json_type": True},
        "name",
    ),
    ("version above 2^63", "GET", f"/v1/registry/datasets/p/d:v{BIG}", {}, "ref"),
    (
        "alias version above 2^63",
        "PUT",
        "/v1/registry/datasets/p/d/aliases/best",
        {"json": {"version": f"v{BIG}"}},
        "version",
    ),
    (
        "attempt above 2^63",
        "POST",
        f"/v1/training/runs/r/attempts/{BIG}/events",
        {"json": {}},
        "number",
    ),
    (
        "fractional resume step",
        "POST",
        "/v1/training/runs/r/resume",
        {"json": {"step": 2.5}},
        "step",
    ),
    ("text resume step", "POST", "/v1/training/runs/r/resume", {"json": {"step": "3"}}, "step"),
    ("huge resume step", "POST", "/v1/training/runs/r/resume", {"json": {"step": 2**64}}, "step"),
    # issue 48 item 6: request bodies are as strict about types as plans
    *[
        (f"evaluation limit {limit!r}", "POST", "/v1/training/evaluations",
         {"json": {"dataset": "p/d", "modelId": "p/none:v1", "limit": limit}}, "limit")
        for limit in (True, "1")
    ],
    ("sampling temperature as text", "POST", "/v1/training/evaluations",
     {"json": {"modelId": "p/none:v1", "sampling": {"temperature": "0.5"}}},
     "sampling.temperature"),
    ("curation minScore as text", "POST", "/v1/training/curations",
     {"json": {"project": "p", "source": "p/d", "dataset": "p/kept", "judge": "model:x",
               "keep": {"minScore": "0.5"}}}, "keep.minScore"),
    ("autoEvaluate as text", "POST", "/v1/training/projects",
     {"json": {"name": "q", "evaluation": {"dataset": "q/d", "grader": "bundle:q/b#g",
                                           "autoEvaluate": "yes"}}}, "evaluation.autoEvaluate"),
    *[
        (f"stage name {name[:8]!r}", "POST", "/v1/training/pipelines",
         {"json": {"kind": "pipeline", "project": "p", "stages": [
             {"kind": "evaluate", "name": name, "dataset": "p/d", "modelId": "p/none:v1"}]}},
         "stages[0].name")
        for name in ("/", "x" * 10_000, "a/../b", "")
    ],
]  # fmt: skip


@pytest.mark.parametrize(
    "method,path,kw,field", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_is_a_400_naming_the_field(lite, method, path, kw, field) -> None:
    kw = dict(kw)
    if kw.pop("json_type", False):
        kw["h"] = {"content-type": "application/json"}
    assert _error(lite.call(method, path, **kw))["field"] == field


def test_bad_rows_are_refused_with_their_line(lite) -> None:
    surrogate = b'{"messages": [{"role": "user", "content": "\\ud800"}]}\n'
    err = _error(lite.call("POST", "/v1/registry/datasets/p/s", content=JSONL + surrogate))
    assert "line 2" in err["message"] and "surrogate" in err["message"]
    deep = JSONL + ('{"messages": ' + DEEP + "}\n").encode()
    err = _error(lite.call("POST", "/v1/registry/datasets/p/s", content=deep))
    assert "line 2" in err["message"] and "nested" in err["message"]
    assert _error(lite.call("GET", "/v1/registry/datasets/p/s"), 404)


def test_worker_events_need_whole_number_counts() -> None:
    assert check_worker_event({"type": "metrics", "step": 3})["step"] == 3
    for ev, field in (
        ({"type": "metrics", "step": "x"}, "step"),
        ({"type": "save", "step": 1.5}, "step"),
        ({"type": "save"}, "step"),
        ({"type": "phase", "totalSteps": 2**64}, "totalSteps"),
        ({"type": 7}, "type"),
    ):
        with pytest.raises(InvalidRequest) as info:
            check_worker_event(ev)
        assert info.value.field == field


def test_a_whole_number_decimal_is_the_integer_it_spells(lite) -> None:
    """Issue 48 item 9: the document's ``type: integer`` takes ``3.0`` (JSON Schema makes no
    difference between 3 and 3.0), so request bodies, plans and worker events do too; a
    fraction, text or a boolean is still refused naming the field."""
    assert check_worker_event({"type": "save", "step": 3.0})["step"] == 3
    lite.call("POST", "/v1/training/projects", json={"name": "p"})
    evaluation = {"modelId": "p/none:v1", "dataset": "p/d", "sampling": {"maxTokens": 8.0}}
    for limit, field in ((3.0, None), (3.5, "limit"), (True, "limit")):
        r = lite.call("POST", "/v1/training/evaluations", json={**evaluation, "limit": limit})
        assert (r.status_code == 400) == (field is not None), r.text
        assert r.json()["error"]["field"] == field or field is None, r.text
    plan = {"kind": "run", "project": "p", "baseModel": "HuggingFaceTB/SmolLM2-135M-Instruct", "config": {
        "dataset": "p/none", "method": "sft", "maxSeqLength": 64.0,
        "hyperparams": {"lora": {"rank": 4.0}}}}  # fmt: skip
    details = _error(lite.call("POST", "/v1/training/runs?dryRun=true", json=plan))["details"]
    assert [d["field"] for d in details] == ["config.dataset"], details
    plan["config"]["maxSeqLength"] = 64.5
    fields = [
        d["field"] for d in _error(lite.call("POST", "/v1/training/runs", json=plan))["details"]
    ]
    assert "config.maxSeqLength" in fields


def test_a_dataset_zip_member_failing_its_checksum_is_refused(lite) -> None:
    """Issue 48 item 5: a member whose CRC fails (or whose compressed data is damaged) was a
    500; it is a 400 naming the member, and nothing is stored."""
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("train.jsonl", JSONL)
    bad_crc = stored.getvalue().replace(b'"hi"', b'"HI"', 1)
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("train.jsonl", JSONL * 50)
    raw = bytearray(deflated.getvalue())
    raw[40:48] = b"\xff" * 8  # inside the member's compressed data
    for body in (bad_crc, bytes(raw)):
        err = _error(lite.call("POST", "/v1/registry/datasets/p/z?filename=z.zip", content=body))
        assert err["field"] == "file"
        assert err["message"].startswith("ZIP member 'train.jsonl' is damaged or cannot be read")
    assert _error(lite.call("GET", "/v1/registry/datasets/p/z"), 404)


def test_cut_or_damaged_bundles_are_refused(lite) -> None:
    whole = _tar_gz({"grader.py": b"print(1)\n" * 100})
    for cut in (whole[: len(whole) // 2], whole[:-4], whole[:-8]):
        err = _error(lite.call("POST", "/v1/registry/bundles/p/b", content=cut))
        assert err["field"] == "file" and "ends early or is damaged" in err["message"]
    assert _error(lite.call("GET", "/v1/registry/bundles/p/b"), 404)
    r = lite.call("POST", "/v1/registry/bundles/p/b", content=whole)
    assert r.status_code in (200, 201), r.text
    plain = gzip.compress(b"not a tar")
    assert _error(lite.call("POST", "/v1/registry/bundles/p/c", content=plain))["field"] == "file"


# -- item 6: ID prefixes are prefixes ------------------------------------------------------


def test_like_wildcards_in_an_id_prefix_match_nothing(lite) -> None:
    with lite.app.state.ctx.db.session() as s:
        s.add(
            Run(
                id="ab0d2fb000000000",
                project="p",
                method="sft",
                state="QUEUED",
                plan={},
                resolved={},
                config_hash="0" * 64,
                base_model="x/y",
                dataset="p/d:v1",
                model_name="y",
                device_kind="cpu",
            )
        )
    with lite.app.state.ctx.db.session() as s:
        assert get_run(s, "ab0d").id == "ab0d2fb000000000"
    for prefix in ("___", "__0d2fb", "%", "a%", "ab_d"):
        assert _error(lite.call("POST", f"/v1/training/runs/{prefix}/cancel"), 404)
        assert _error(lite.call("GET", f"/v1/training/endpoints/{prefix}"), 404)
    assert _error(lite.call("GET", "/v1/training/base-models/___"), 404)


# -- item 2: the service reads only what the client uploaded -------------------------------


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _image_row(path: str) -> bytes:
    part = {"type": "image", "image": path}
    answer = {"role": "assistant", "content": "a cat"}
    return json.dumps({"messages": [{"role": "user", "content": [part]}, answer]}).encode() + b"\n"


def test_rows_never_make_the_service_read_its_own_files(lite, tmp_path) -> None:
    secret = tmp_path / "server-side.png"
    secret.write_bytes(PNG)
    (tmp_path / "h" / "uploads").mkdir(exist_ok=True)
    (tmp_path / "h" / "uploads" / "beside.png").write_bytes(PNG)
    messages = set()
    for path in (str(secret), "../server-side.png", "beside.png", "file://" + str(secret)):
        for body in (_image_row(path), _zip({"train.jsonl": _image_row(path)})):
            err = _error(lite.call("POST", "/v1/registry/datasets/p/img", content=body))
            assert "not in the upload" in err["message"], err
            # a ZIP's refusal names its member file; otherwise it is one sentence
            msg = err["message"].replace("upload.jsonl:train.jsonl", "upload.jsonl")
            messages.add(msg.replace(repr(path), "PATH"))
    missing = _error(
        lite.call("POST", "/v1/registry/datasets/p/img", content=_image_row("/no/such.png"))
    )
    messages.add(missing["message"].replace(repr("/no/such.png"), "PATH"))
    assert len(messages) == 1, messages  # one sentence, whatever the path and the file
    assert _error(lite.call("GET", "/v1/registry/datasets/p/img"), 404)
    inside = _zip({"train.jsonl": _image_row("img/cat.png"), "img/cat.png": PNG})
    r = lite.call("POST", "/v1/registry/datasets/p/img", content=inside)
    assert r.status_code in (200, 201), r.text


# -- item 9: the small things ---------------------------------------------------------------


def test_405_carries_allow(lite) -> None:
    r = lite.call("PUT", "/v1/training/projects")
    assert _error(r, 405)["code"] == "method_not_allowed"
    assert r.headers["Allow"] == "GET, POST"


def test_allow_lists_the_methods_the_document_gives_the_path(lite) -> None:
    """Issue 48 item 9: a path that also matches a templated route (``/{kinds}/…`` for
    ``/datasets/…``, ``/{endpoint_id}`` for ``/info``) lists the methods of its own, more
    concrete path only, as the OpenAPI document gives them; so does every documented path."""
    r = lite.call("PATCH", "/v1/registry/datasets/p/d")
    assert (r.status_code, r.headers["Allow"]) == (405, "POST")
    r = lite.call("PATCH", "/v1/training/endpoints/info")
    assert (r.status_code, r.headers["Allow"]) == (405, "GET")
    for path, operations in lite.app.openapi()["paths"].items():
        documented = {m.upper() for m in operations}
        # a collection no concrete path shadows; any other parameter value
        url = re.sub(r"\{[^}]+\}", "x", path.replace("{number}", "1"))
        r = lite.call("PATCH" if "PATCH" not in documented else "TRACE", url)
        assert r.status_code == 405, (path, r.text)
        assert set(r.headers["Allow"].split(", ")) == documented, (path, r.headers["Allow"])


@pytest.mark.parametrize("name", ["\u212aelvin", "caf\u00e9", "\u0130stanbul", "\uff41bc"])
def test_non_ascii_names_are_refused_even_when_they_fold_to_ascii(lite, name) -> None:
    assert (
        _error(lite.call("POST", "/v1/training/projects", json={"name": name}))["field"] == "name"
    )
    r = lite.call("POST", f"/v1/registry/datasets/p/{name}", content=JSONL)
    assert r.status_code == 400, r.text
    assert _error(lite.call("GET", f"/v1/registry/datasets/p/{name}"))["field"] == "ref"
    assert lite.call("GET", "/v1/training/projects").json()["projects"] == []


@pytest.mark.local_stores
def test_home_state_and_blobs_are_private(lite) -> None:
    r = lite.call("POST", "/v1/registry/datasets/p/d", content=JSONL)
    assert r.status_code in (200, 201), r.text
    home = lite.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    blobs = home / "blobs"
    assert stat.S_IMODE(blobs.stat().st_mode) == 0o700
    files = [p for p in blobs.rglob("*") if p.is_file()]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_openapi_documents_the_error_shape_bodies_and_answers(lite) -> None:
    from akka_optimize.service.openapi import OPENAI_PATHS

    doc = lite.call("GET", "/openapi.json").json()
    text = json.dumps(doc)
    assert '"422"' not in text and "HTTPValidationError" not in text
    assert doc["components"]["schemas"]["ErrorBody"]["required"] == ["error"]
    paths = doc["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            assert any(s.startswith("2") for s in op["responses"]), (method, path)
            if path != "/healthz":
                err = op["responses"]["400"]["content"]["application/json"]["schema"]
                ours = {"$ref": "#/components/schemas/ErrorBody"}
                openai = "/openai/v1/" in path or path.startswith(OPENAI_PATHS)  # issue 51
                assert err == ours or (openai and ours in err["anyOf"])
                assert not any(p["name"] == "authorization" for p in op.get("parameters", []))
    upload = paths["/v1/registry/datasets/{namespace}/{name}"]["post"]["requestBody"]
    assert "application/octet-stream" in upload["content"]
    plan = paths["/v1/training/runs"]["post"]["requestBody"]["content"]["application/json"]
    assert plan["schema"] == {"$ref": "#/components/schemas/RunPlan"}
    assert "config" in doc["components"]["schemas"]["RunPlan"]["properties"]


def test_openapi_lists_every_status_and_body_a_route_answers_and_reads(lite) -> None:
    """Read from each route's own code: the success statuses it chooses at run time
    (``status_code=...``, or ``_answer``'s 201/200) are all documented, and a route that
    reads the raw request (``read_json_body``, ``request.body()``, ``_spool``) documents
    a request body; pipelines take the PipelinePlan schema."""
    import inspect
    import re

    from akka_optimize.service.routers import ROUTERS

    doc = lite.call("GET", "/openapi.json").json()
    checked = 0
    for route in [r for mod in ROUTERS for r in mod.router.routes]:
        if not route.include_in_schema:
            continue
        code = inspect.getsource(route.endpoint)
        statuses = set(re.findall(r"status_code=(\d{3})", code))
        statuses |= set(re.findall(r"status_code=\d{3} if .+? else (\d{3})", code))
        if "_answer(" in code:
            statuses |= {"200", "201"}
        reads = any(
            k in code for k in ("read_json_body(", "request.body()", "request.stream()", "_spool(")
        )
        for method in route.methods:
            op = doc["paths"][route.path_format][method.lower()]
            documented = {s for s in op["responses"] if s.startswith("2")}
            assert statuses <= documented, (method, route.path, statuses, documented)
            if reads:
                assert "requestBody" in op, (method, route.path)
            checked += 1
    assert checked > 60
    pipeline = doc["paths"]["/v1/training/pipelines"]["post"]
    body = pipeline["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PipelinePlan"}
    assert "stages" in doc["components"]["schemas"]["PipelinePlan"]["properties"]
    assert {"200", "201"} <= set(pipeline["responses"])


@contextlib.contextmanager
def _quick_server(read_timeout: float = 0.3):
    """A uvicorn server on a free port with :class:`TimedH11Protocol` at ``read_timeout``
    seconds: ``/echo`` answers its body, ``/slow`` after 1 s. Yields the port."""
    import uvicorn
    from fastapi import FastAPI

    from akka_optimize.service.connections import TimedH11Protocol

    proto = type("Quick", (TimedH11Protocol,), {"read_timeout": read_timeout})
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: dict) -> dict:
        return body

    @app.post("/slow")
    async def slow(body: dict) -> dict:
        await asyncio.sleep(1.0)  # answering for longer than the read timeout
        return body

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, http=proto, log_level="error")
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        yield port
    finally:
        server.should_exit = True
        t.join(10)


def test_a_silent_client_is_disconnected(tmp_path) -> None:
    with _quick_server() as port:
        for partial in (b"", b"POST /echo HTTP/1.1\r\nHost: x\r\n", _half_body()):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                c.sendall(partial)
                assert c.recv(65536) == b""  # closed by the server, not by our timeout
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            body = b'{"a": 1}'
            c.sendall(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert c.recv(65536).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            # a request answered for longer than the read timeout is not cut: the client
            # has sent all of it
            c.sendall(
                b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert c.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_trickled_head_is_cut_at_its_deadline_and_a_huge_one_answered_431() -> None:
    """issue 48 item 7: a client sending one header byte at a time, each within the read
    timeout, held its connection for ever (the silence clock restarted on every byte);
    the whole head now has the read timeout as its deadline. A 1 MiB header reset the
    connection; it is answered 431 and the client reads that answer."""
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 600
    with _quick_server(read_timeout=0.3) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.settimeout(0.1)  # a byte every 0.1 s: each well within the 0.3 s silence
            closed = False
            for byte in head:  # 60 s of bytes if nothing cuts it
                try:
                    c.sendall(bytes([byte]))
                    closed = c.recv(1) == b""
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                if closed:
                    break
            assert closed, "the server kept a trickled head open past its deadline"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (1 << 20))
            c.sendall(b"\r\n\r\n")
            answer = c.recv(65536)
            assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large"), answer
            assert b"larger than 16384 bytes" in answer


def _half_body() -> bytes:
    return (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )


def test_a_stage_name_is_documented_as_the_string_the_service_takes(lite) -> None:
    """Issue 48 item 9: the service refuses a stage name given as null, so the document
    calls a stage's name a string of the name grammar (left out for the default)."""
    schemas = lite.app.openapi()["components"]["schemas"]
    for stage in ("CurateStage", "TrainStage", "EvaluateStage"):
        name = schemas[stage]["properties"]["name"]
        assert (name["type"], name["maxLength"], "anyOf" in name) == ("string", 100, False)
    body = {"kind": "pipeline", "project": "p", "stages": [{"kind": "evaluate", "name": None}]}
    lite.call("POST", "/v1/training/projects", json={"name": "p"})
    assert _error(lite.call("POST", "/v1/training/pipelines", json=body))["field"] == (
        "stages[0].name"
    )
