"""Project isolation (issue 14 item 1): a token of project ``a`` against project ``b``.

One service for the module. Project ``b`` holds one of every kind of object (a dataset,
a dataset with an image, a pushed image, a scoring bundle, a finished run with kept
snapshots and its registered model, an endpoint serving that model); project ``a`` holds
a dataset and a cancelled run. :data:`ROUTES` has one row per route of the app, walked
from the routers, so a new route without a row fails :func:`test_every_route_has_a_row`.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import cluster_stores
from helpers import LiveService, free_port
from jobs.jobs_helpers import TINY, gsm8k_rows, wait_state

PNG = b"\x89PNG\r\n\x1a\n" + b"project b's picture"
PIC_PNG = b"\x89PNG\r\n\x1a\n" + b"picture inside b's zip"
ACTION = "optimize.training.projects."


def _plan(project: str, dataset: str, **extra: Any) -> dict[str, Any]:
    plan = {
        "kind": "run",
        "project": project,
        "baseModel": TINY,
        "config": {
            "dataset": dataset,
            "method": "sft",
            "maxSeqLength": 512,
            "hyperparams": {
                "training": {"epochs": 1, "microBatchPerGpu": 2, "seed": 7},
                "optimizer": {"learningRate": 0.001},
            },
        },
        "execution": {"saveEverySteps": 1, "keepRecoverable": 2},
    }
    plan.update(extra)
    return plan


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class World:
    """The service, its tokens and project ``b``'s object IDs."""

    def __init__(self, svc: LiveService) -> None:
        self.svc = svc
        self.admin = svc.token or ""
        self.tokens: dict[str, str] = {}
        self.ids: dict[str, str] = {}

    def call(self, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("timeout", 120)
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(method, self.svc.url + path, headers=headers, **kw)

    def ok(self, token: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        r = self.call(token, method, path, **kw)
        assert r.status_code < 300, (method, path, r.status_code, r.text)
        return r.json()

    def b_markers(self) -> list[str]:
        """Strings only project ``b``'s objects carry."""
        i = self.ids
        return [
            i["b_run"],
            i["b_endpoint"],
            i["b_evaluation"],
            i["b_comparison"],
            i["b_curation"],
            i["b_pipeline"],
            i["b_project_id"],
            i["b_import"],
            "b/train",
            "b/pics",
            "b/scoring",
            "b/grader",
            "b/tiny-smollm2",
            i["b_image"],
            i["b_pic"],
            i["b_file"],
            i["b_job"],
        ]


def recipe_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the world's service reads recipes from (``service.recipeRoots``, with the
    tiny model's folder), made when missing."""
    root = tmp_path_factory.getbasetemp() / "recipe-root"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Any:
    tmp = tmp_path_factory.mktemp("access")
    (tmp / "home").mkdir()
    dep = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    dep["service"]["recipeRoots"] = [str(recipe_root(tmp_path_factory)), str(tiny_model_dir)]
    dep["grafana"] = {"url": "https://grafana.example.com"}  # runs/{run}/grafana answers b
    (tmp / "home" / "deployment.yaml").write_text(yaml.safe_dump(dep))
    svc = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port()).start()
    try:
        yield _populate(World(svc), tmp)
    finally:
        svc.stop()


def _populate(w: World, tmp: Path) -> World:
    svc, admin = w.svc, w.admin
    for name in ("a", "b"):
        w.ok(admin, "POST", "/v1/training/projects", json={"name": name})
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    w.tokens = {p: svc.create_token(p) for p in ("a", "b")}
    a, b = w.tokens["a"], w.tokens["b"]
    w.ids["b_project_id"] = w.ok(b, "GET", "/v1/training/projects/b")["id"]

    rows = gsm8k_rows(tmp / "b.jsonl", 4).read_bytes()
    w.ok(b, "POST", "/v1/registry/datasets/b/train", content=rows)
    run = w.ok(b, "POST", "/v1/training/runs", json=_plan("b", "train"))
    w.ids["b_run"] = run["id"]

    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as zf:
        row = {"messages": [
            {"role": "user", "content": [{"type": "image", "image": "pic.png"},
                                         {"type": "text", "text": "What is this?"}]},
            {"role": "assistant", "content": "A picture."}]}  # fmt: skip
        zf.writestr("pics.jsonl", json.dumps(row) + "\n")
        zf.writestr("pic.png", PIC_PNG)
    pics = w.ok(
        b, "POST", "/v1/registry/datasets/b/pics?filename=pics.zip", content=zbuf.getvalue()
    )
    w.ids["b_pic"] = pics["metadata"]["images"][0]
    w.ids["b_pics_object"] = pics["metadata"]["object"]["digest"]
    w.ids["b_image"] = w.ok(b, "POST", "/v1/registry/images?filename=x.png", content=PNG)["digest"]
    w.ok(b, "POST", "/v1/registry/bundles/b/scoring", content=_tar({"grade.py": b"print(1)\n"}))
    w.ids["b_import"] = w.ok(
        b, "POST", f"/v1/registry/adapter-imports/b/ext?baseModel={TINY}",
        content=_tar({"adapter_config.json": b"{}"}),
    )["id"]  # fmt: skip

    w.ok(a, "POST", "/v1/registry/datasets/a/train", content=rows)
    a_run = w.ok(a, "POST", "/v1/training/runs", json=_plan("a", "train"))
    w.ids["a_run"] = a_run["id"]
    w.ok(a, "POST", f"/v1/training/runs/{a_run['id']}/cancel")

    done = wait_state(svc, w.ids["b_run"], ("SUCCEEDED", "FAILED"))
    assert done["state"] == "SUCCEEDED", done
    ep = w.ok(b, "POST", "/v1/training/endpoints", json={"model": "b/tiny-smollm2:v1"})
    w.ids["b_endpoint"] = ep["id"]
    w.ok(b, "POST", "/v1/registry/bundles/b/grader", content=_tar({"g.py": GRADER}))
    ev = w.ok(b, "POST", "/v1/training/evaluations", json=_evaluation("b"))
    w.ids["b_evaluation"] = ev["id"]
    cmp = w.ok(b, "POST", "/v1/training/comparisons", json=_comparison("b"))
    w.ids["b_comparison"] = cmp["id"]
    settings = {"dataset": "b/train", "grader": "bundle:b/grader#g", "autoEvaluate": False}
    w.ok(b, "PUT", "/v1/training/projects/b/evaluation", json=settings)
    cu = w.ok(b, "POST", "/v1/training/curations", json=_curation("b"))
    w.ids["b_curation"] = cu["id"]
    w.ok(b, "POST", f"/v1/training/curations/{cu['id']}/cancel")
    pipe = w.ok(b, "POST", "/v1/training/pipelines", json=_pipeline("b"))
    w.ids["b_pipeline"] = pipe["id"]
    w.ok(b, "POST", f"/v1/training/pipelines/{pipe['id']}/cancel")
    upload = {"file": ("b.jsonl", rows)}
    w.ids["b_file"] = w.ok(b, "POST", "/v1/files", files=upload, data={"purpose": "fine-tune"})[
        "id"
    ]
    job = {"model": TINY, "training_file": w.ids["b_file"], "suffix": "b"}
    w.ids["b_job"] = w.ok(b, "POST", "/v1/fine_tuning/jobs", json=job)["id"]
    w.ok(b, "POST", f"/v1/fine_tuning/jobs/{w.ids['b_job']}/cancel")
    return w


def _curation(owner: str, **kw: Any) -> dict[str, Any]:
    body = {"project": owner, "source": f"{owner}/train", "judge": f"model:{TINY_MODEL}",
            "keep": {"topShare": 0.5}, "dataset": f"{owner}/curated"}  # fmt: skip
    return {**body, **kw}


def _pipeline(owner: str, **kw: Any) -> dict[str, Any]:
    stage = {k: v for k, v in _curation(owner).items() if k != "project"}
    return {"kind": "pipeline", "project": owner, "stages": [{"kind": "curate", **stage}], **kw}


GRADER = b"def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


def _evaluation(owner: str, **kw: Any) -> dict[str, Any]:
    body = {
        "modelId": f"{owner}/tiny-smollm2:v1",
        "dataset": f"{owner}/train",
        "grader": f"bundle:{owner}/grader#g",
        "limit": 1,
        "sampling": {"maxTokens": 2},
    }
    return {**body, **kw}


def _comparison(owner: str, **kw: Any) -> dict[str, Any]:
    return _evaluation(owner, **{"baselineModelId": TINY_MODEL, **kw})


# -- the table -------------------------------------------------------------------------
# Each row: (method, route path) -> cases. A case is a dict:
#   path: the request path ({run}, {endpoint}, {image}, {pic}, {pics_object} filled in);
#   expect: "hidden" (404, as if missing), "forbid:ACTION" (403 naming the action),
#           "refused:STATUS" (that status, sentence as for a missing object),
#           "list" (200 without b's objects), "shared" (not project data: not 403);
#   token: "a" (default) or "admin"; json / content / params: the request's body.
TINY_MODEL = "akka-optimize/tiny-smollm2"
OAI_ROWS = (
    b'{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n'
)
OAI_GRADER = {"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
              "reference": "x", "operation": "eq"}  # fmt: skip
ROUTES: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("GET", "/healthz"): [{"path": "/healthz", "expect": "shared"}],
    ("GET", "/v1/training/info"): [{"path": "/v1/training/info", "expect": "shared"}],
    ("GET", "/v1/training/capacity"): [
        {"path": "/v1/training/capacity", "expect": "list"},
        {"path": "/v1/training/capacity", "params": {"project": "b"}, "expect": "hidden"},
    ],
    ("GET", "/openapi.json"): [{"path": "/openapi.json", "expect": "shared"}],
    ("GET", "/docs"): [{"path": "/docs", "expect": "shared"}],
    ("GET", "/redoc"): [{"path": "/redoc", "expect": "shared"}],
    ("GET", "/v1/registry/info"): [{"path": "/v1/registry/info", "expect": "shared"}],
    ("POST", "/v1/registry/datasets/{namespace}/{name}"): [
        {"path": "/v1/registry/datasets/b/train", "content": b'{"prompt":"x","completion":"y"}',
         "expect": "forbid:datasets.register"},
        {"path": "/v1/registry/datasets/b/new", "content": b'{"prompt":"x","completion":"y"}',
         "expect": "forbid:datasets.register"},
    ],
    ("POST", "/v1/registry/bundles/{namespace}/{name}"): [
        {"path": "/v1/registry/bundles/b/scoring", "content": _tar({"g.py": b"2"}),
         "expect": "forbid:bundles.register"},
    ],
    ("POST", "/v1/registry/models/{namespace}/{name}"): [
        {"path": "/v1/registry/models/b/tiny-smollm2", "params": {"base_model": TINY},
         "content": _tar({"adapter_config.json": b"{}"}), "expect": "forbid:models.register"},
    ],
    ("POST", "/v1/registry/adapter-imports/{namespace}/{name}"): [
        {"path": "/v1/registry/adapter-imports/b/ext", "params": {"baseModel": TINY},
         "content": _tar({"adapter_config.json": b"{}"}), "expect": "forbid:models.register"},
    ],
    ("GET", "/v1/registry/adapter-imports/{import_id}"): [
        {"path": "/v1/registry/adapter-imports/{b_import}", "expect": "hidden"},
        {"path": "/v1/registry/adapter-imports/{b_import_prefix}", "expect": "hidden"},
    ],
    ("POST", "/v1/registry/models/{namespace}/{name}/from-tinker"): [
        {"path": "/v1/registry/models/b/tiny-smollm2/from-tinker",
         "json": {"path": "tinker://sess-0:train:0/sampler_weights/s"},
         "expect": "forbid:models.register"},
    ],
    ("POST", "/v1/registry/images"): [
        {"path": "/v1/registry/images", "params": {"filename": "mine.png"},
         "content": b"\x89PNG\r\n\x1a\nproject a's own", "expect": "own"},
    ],
    ("GET", "/v1/registry/images/{digest}"): [
        {"path": "/v1/registry/images/{image}", "expect": "hidden"},
        {"path": "/v1/registry/images/{pic}", "expect": "hidden"},
        {"path": "/v1/registry/images/{pics_object}", "expect": "hidden"},
        {"path": "/v1/registry/images/{pics_object}", "token": "admin", "expect": "hidden"},
    ],
    ("GET", "/v1/registry/{kinds}"): [
        {"path": f"/v1/registry/{k}", "expect": "list"} for k in ("datasets", "models", "bundles")
    ] + [{"path": "/v1/registry/datasets", "params": {"namespace": "b"}, "expect": "list"}],
    ("GET", "/v1/registry/{kinds}/{namespace}/{name}"): [
        {"path": "/v1/registry/datasets/b/train", "expect": "hidden"},
        {"path": "/v1/registry/datasets/b/train:v1", "expect": "hidden"},
        {"path": "/v1/registry/models/b/tiny-smollm2", "expect": "hidden"},
        {"path": "/v1/registry/bundles/b/scoring", "expect": "hidden"},
        {"path": f"/v1/registry/models/{TINY_MODEL}", "expect": "shared"},
    ],
    ("GET", "/v1/registry/{kinds}/{namespace}/{name}/versions"): [
        {"path": "/v1/registry/datasets/b/train/versions", "expect": "hidden"},
        {"path": "/v1/registry/models/b/tiny-smollm2/versions", "expect": "hidden"},
        {"path": "/v1/registry/bundles/b/scoring/versions", "expect": "hidden"},
    ],
    ("GET", "/v1/registry/datasets/{namespace}/{name}/object"): [
        {"path": "/v1/registry/datasets/b/train/object", "expect": "hidden"},
    ],
    ("GET", "/v1/registry/models/{namespace}/{name}/object"): [
        {"path": "/v1/registry/models/b/tiny-smollm2/object", "expect": "hidden"},
    ],
    ("GET", "/v1/registry/models/{namespace}/{name}/merged"): [
        {"path": "/v1/registry/models/b/tiny-smollm2/merged", "expect": "hidden"},
    ],
    ("PUT", "/v1/registry/{kinds}/{namespace}/{name}/aliases/{alias}"): [
        {"path": "/v1/registry/datasets/b/train/aliases/champion", "json": {"version": "v1"},
         "expect": "forbid:aliases.set"},
        {"path": "/v1/registry/models/b/tiny-smollm2/aliases/champion",
         "json": {"version": "v1"}, "expect": "forbid:aliases.set"},
    ],
    ("PUT", "/v1/registry/{kinds}/{namespace}/{name}/annotations"): [
        {"path": "/v1/registry/models/b/tiny-smollm2/annotations",
         "json": {"annotations": {"owner": "a"}}, "expect": "forbid:annotations.set"},
    ],
    ("POST", "/v1/training/projects"): [
        {"path": "/v1/training/projects", "json": {"name": "c"}, "expect": "forbid:create"},
    ],
    ("POST", "/v1/training/recipes"): [
        {"path": "/v1/training/recipes", "json": {"project": "b", "recipe": {}},
         "expect": "forbid:recipes.submit"},
    ],
    ("POST", "/v1/training/recipes/claim"): [  # a project token claims its project's only
        {"path": "/v1/training/recipes/claim", "expect": "own",
         "json": {"accepts": [{"schema_version": "12.0.0", "implementation": "hf-causal-lm-v1",
                               "computation": "12.0.0"}]}},
    ],
    ("GET", "/v1/training/projects"): [{"path": "/v1/training/projects", "expect": "list"}],
    ("GET", "/v1/training/projects/{project}"): [
        {"path": "/v1/training/projects/b", "expect": "hidden"},
        {"path": "/v1/training/projects/{b_project_id}", "expect": "hidden"},
    ],
    ("PUT", "/v1/training/projects/{project}/evaluation"): [
        {"path": "/v1/training/projects/b/evaluation",
         "json": {"dataset": "b/train", "grader": "bundle:b/grader#g"},
         "expect": "forbid:evaluations.settings"},
        {"path": "/v1/training/projects/{b_project_id}/evaluation",
         "json": {"dataset": "b/train", "grader": "bundle:b/grader#g"},
         "expect": "forbid:evaluations.settings"},
    ],
    ("GET", "/v1/training/projects/{project}/scores"): [
        {"path": "/v1/training/projects/b/scores", "expect": "hidden"},
    ],
    ("GET", "/v1/training/base-models"): [
        {"path": "/v1/training/base-models", "expect": "shared"}
    ],
    ("POST", "/v1/training/base-models"): [
        {"path": "/v1/training/base-models", "json": {"repository": TINY}, "expect": "shared"}
    ],
    ("GET", "/v1/training/base-models/candidates"): [
        {"path": "/v1/training/base-models/candidates", "params": {"author": "nobody"},
         "expect": "shared"},
    ],
    ("GET", "/v1/training/base-models/{ref:path}"): [
        {"path": f"/v1/training/base-models/{TINY}", "expect": "shared"}
    ],
    ("POST", "/v1/training/data/preview"): [
        {"path": "/v1/training/data/preview", "json": {"dataset": "b/train", "baseModel": TINY},
         "expect": "hidden"},
    ],
    ("POST", "/v1/training/runs"): [
        {"path": "/v1/training/runs", "json": _plan("b", "train"), "expect": "forbid:runs.start"},
        {"path": "/v1/training/runs", "params": {"dryRun": "true"}, "json": _plan("b", "train"),
         "expect": "forbid:runs.start"},
        {"path": "/v1/training/runs", "params": {"dryRun": "true"},
         "json": _plan("a", "b/train"), "expect": "refused:400"},
        {"path": "/v1/training/runs", "params": {"dryRun": "true"},
         "json": _plan("a", "train", branchFrom={"run": "{run}", "snapshot": "step-2"}),
         "expect": "refused:400"},
        {"path": "/v1/training/runs", "params": {"dryRun": "true"},
         "json": _plan("a", "train", warmStartModelId="b/tiny-smollm2:v1"),
         "expect": "refused:400"},
        # Even an admin does not link two projects.
        {"path": "/v1/training/runs", "token": "admin", "params": {"dryRun": "true"},
         "json": _plan("a", "train", branchFrom={"run": "{run}", "snapshot": "step-2"}),
         "expect": "forbid:runs.branch"},
        {"path": "/v1/training/runs", "token": "admin", "params": {"dryRun": "true"},
         "json": _plan("a", "train", warmStartModelId="b/tiny-smollm2:v1"),
         "expect": "forbid:runs.warmStart"},
    ],
    ("GET", "/v1/training/runs"): [
        {"path": "/v1/training/runs", "expect": "list"},
        {"path": "/v1/training/runs", "params": {"project": "b"}, "expect": "list"},
    ],
    ("GET", "/v1/training/runs/{run_id}"): [
        {"path": "/v1/training/runs/{run}", "expect": "hidden"},
        {"path": "/v1/training/runs/{run_prefix}", "expect": "hidden"},
    ],
    ("GET", "/metrics"): [{"path": "/metrics", "expect": "forbid:metrics.read"}],
    ("GET", "/v1/training/runs/{run_id}/grafana"): [
        {"path": "/v1/training/runs/{run}/grafana", "params": {"platformProject": "ops"},
         "expect": "hidden"},
        {"path": "/v1/training/runs/{run_prefix}/grafana", "params": {"platformProject": "ops"},
         "expect": "hidden"},
    ],
    ("GET", "/v1/training/runs/{run_id}/metrics"): [
        {"path": "/v1/training/runs/{run}/metrics", "expect": "hidden"}
    ],
    ("GET", "/v1/training/runs/{run_id}/snapshots"): [
        {"path": "/v1/training/runs/{run}/snapshots", "expect": "hidden"}
    ],
    ("GET", "/v1/training/runs/{run_id}/compare"): [
        {"path": "/v1/training/runs/{run}/compare", "params": {"baseline": "{run}"},
         "expect": "hidden"},
        {"path": "/v1/training/runs/{a_run}/compare", "params": {"baseline": "{run}"},
         "expect": "hidden"},
        {"path": "/v1/training/runs/{a_run}/compare", "params": {"baseline": "{run}"},
         "token": "admin", "expect": "forbid:runs.compare"},
    ],
    ("POST", "/v1/training/runs/{run_id}/sweep"): [
        {"path": "/v1/training/runs/{run}/sweep",
         "json": {"snapshot": "step-2", "steps": 1, "grid": {"seed": [1]}}, "expect": "hidden"},
    ],
    ("GET", "/v1/training/runs/{run_id}/tree"): [
        {"path": "/v1/training/runs/{run}/tree", "expect": "hidden"}
    ],
    ("GET", "/v1/training/runs/{run_id}/ancestry"): [
        {"path": "/v1/training/runs/{run}/ancestry", "expect": "hidden"}
    ],
    ("GET", "/v1/training/runs/{run_id}/snapshots/{name}"): [
        {"path": "/v1/training/runs/{run}/snapshots/step-2", "expect": "hidden"}
    ],
    ("GET", "/v1/training/runs/{run_id}/failure"): [
        {"path": "/v1/training/runs/{run}/failure", "expect": "hidden"}
    ],
    ("POST", "/v1/training/runs/{run_id}/cancel"): [
        {"path": "/v1/training/runs/{run}/cancel", "expect": "hidden"}
    ],
    ("POST", "/v1/training/runs/{run_id}/pause"): [
        {"path": "/v1/training/runs/{run}/pause", "expect": "hidden"}
    ],
    ("POST", "/v1/training/runs/{run_id}/resume"): [
        {"path": "/v1/training/runs/{run}/resume", "json": {"step": 1}, "expect": "hidden"}
    ],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/events"): [
        {"path": "/v1/training/runs/{run}/attempts/1/events",
         "json": {"type": "progress", "step": 1}, "expect": "hidden"},
    ],
    ("GET", "/v1/training/runs/{run_id}/samples"): [
        {"path": "/v1/training/runs/{run}/samples", "expect": "hidden"},
    ],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge"): [
        {"path": "/v1/training/runs/{run}/attempts/1/judge", "json": {}, "expect": "hidden"},
    ],
    ("POST", "/v1/training/runs/{run_id}/attempts/{number}/judge/chat/completions"): [
        {"path": "/v1/training/runs/{run}/attempts/1/judge/chat/completions",
         "json": {"messages": [{"role": "user", "content": "hi"}]}, "expect": "hidden"},
    ],
    ("POST", "/v1/training/evaluations"): [
        {"path": "/v1/training/evaluations", "json": _evaluation("b"), "expect": "hidden"},
        {"path": "/v1/training/evaluations",
         "json": _evaluation("b", modelId=TINY_MODEL, project="b"),
         "expect": "forbid:evaluations.create"},
        {"path": "/v1/training/evaluations", "token": "admin",
         "json": _evaluation("b", project="a"), "expect": "forbid:evaluations.create"},
    ],
    ("GET", "/v1/training/evaluations"): [
        {"path": "/v1/training/evaluations", "expect": "list"},
        {"path": "/v1/training/evaluations", "params": {"project": "b"}, "expect": "list"},
    ],
    ("GET", "/v1/training/evaluations/{evaluation_id}"): [
        {"path": "/v1/training/evaluations/{evaluation}", "expect": "hidden"},
        {"path": "/v1/training/evaluations/{evaluation_prefix}", "expect": "hidden"},
        {"path": "/v1/training/evaluations/{evaluation}", "params": {"examples": "true"},
         "expect": "hidden"},
    ],
    ("POST", "/v1/training/evaluations/{evaluation_id}/cancel"): [
        {"path": "/v1/training/evaluations/{evaluation}/cancel", "expect": "hidden"},
    ],
    ("POST", "/v1/training/comparisons"): [
        {"path": "/v1/training/comparisons", "json": _comparison("b"), "expect": "hidden"},
        {"path": "/v1/training/comparisons", "token": "admin",
         "json": _comparison("b", project="a"), "expect": "forbid:comparisons.create"},
        {"path": "/v1/training/comparisons", "token": "admin",
         "json": _comparison("a", modelId=TINY_MODEL, project="a",
                             baselineModelId="b/tiny-smollm2:v1"),
         "expect": "forbid:comparisons.create"},
    ],
    ("GET", "/v1/training/comparisons"): [
        {"path": "/v1/training/comparisons", "expect": "list"},
        {"path": "/v1/training/comparisons", "params": {"project": "b"}, "expect": "list"},
    ],
    ("GET", "/v1/training/comparisons/{comparison_id}"): [
        {"path": "/v1/training/comparisons/{comparison}", "expect": "hidden"},
        {"path": "/v1/training/comparisons/{comparison_prefix}", "expect": "hidden"},
    ],
    ("POST", "/v1/training/comparisons/{comparison_id}/cancel"): [
        {"path": "/v1/training/comparisons/{comparison}/cancel", "expect": "hidden"},
    ],
    ("POST", "/v1/training/runs/{run_id}/snapshots/{name}/register"): [
        {"path": "/v1/training/runs/{run}/snapshots/step-1/register", "json": {},
         "expect": "hidden"},
    ],
    ("POST", "/v1/training/curations"): [
        {"path": "/v1/training/curations", "json": _curation("b"),
         "expect": "forbid:curations.create"},
        {"path": "/v1/training/curations", "json": _curation("a", source="b/train"),
         "expect": "hidden"},
        {"path": "/v1/training/curations", "json": _curation("a", dataset="b/curated"),
         "expect": "forbid:curations.create"},
    ],
    ("GET", "/v1/training/curations"): [
        {"path": "/v1/training/curations", "expect": "list"},
        {"path": "/v1/training/curations", "params": {"project": "b"}, "expect": "list"},
    ],
    ("GET", "/v1/training/curations/{curation_id}"): [
        {"path": "/v1/training/curations/{curation}", "expect": "hidden"},
        {"path": "/v1/training/curations/{curation_prefix}", "expect": "hidden"},
    ],
    ("POST", "/v1/training/curations/{curation_id}/cancel"): [
        {"path": "/v1/training/curations/{curation}/cancel", "expect": "hidden"},
    ],
    ("POST", "/v1/training/pipelines"): [
        {"path": "/v1/training/pipelines", "json": _pipeline("b"),
         "expect": "forbid:pipelines.start"},
        {"path": "/v1/training/pipelines", "json": _pipeline("b"), "params": {"dryRun": "true"},
         "expect": "forbid:pipelines.start"},
    ],
    ("GET", "/v1/training/pipelines"): [
        {"path": "/v1/training/pipelines", "expect": "list"},
        {"path": "/v1/training/pipelines", "params": {"project": "b"}, "expect": "list"},
    ],
    ("GET", "/v1/training/pipelines/{pipeline_id}"): [
        {"path": "/v1/training/pipelines/{pipeline}", "expect": "hidden"},
        {"path": "/v1/training/pipelines/{pipeline_prefix}", "expect": "hidden"},
    ],
    ("POST", "/v1/training/pipelines/{pipeline_id}/cancel"): [
        {"path": "/v1/training/pipelines/{pipeline}/cancel", "expect": "hidden"},
    ],
    ("POST", "/v1/training/pipelines/{pipeline_id}/resume"): [
        {"path": "/v1/training/pipelines/{pipeline}/resume", "expect": "hidden"},
    ],
    ("POST", "/v1/training/endpoints"): [
        {"path": "/v1/training/endpoints", "json": {"model": "b/tiny-smollm2:v1"},
         "expect": "hidden"},
        {"path": "/v1/training/endpoints", "json": {"model": TINY, "project": "b"},
         "expect": "forbid:endpoints.create"},
        {"path": "/v1/training/endpoints", "token": "admin",
         "json": {"model": "b/tiny-smollm2:v1", "project": "a"},
         "expect": "forbid:endpoints.create"},
    ],
    ("GET", "/v1/training/endpoints"): [
        {"path": "/v1/training/endpoints", "expect": "list"},
        {"path": "/v1/training/endpoints", "params": {"project": "b"}, "expect": "hidden"},
    ],
    ("GET", "/v1/training/endpoints/info"): [
        {"path": "/v1/training/endpoints/info", "expect": "shared"}
    ],
    ("GET", "/v1/training/endpoints/{endpoint_id}"): [
        {"path": "/v1/training/endpoints/{endpoint}", "expect": "hidden"},
        {"path": "/v1/training/endpoints/{endpoint_prefix}", "expect": "hidden"},
    ],
    ("DELETE", "/v1/training/endpoints/{endpoint_id}"): [
        {"path": "/v1/training/endpoints/{endpoint}", "expect": "hidden"}
    ],
    ("DELETE", "/v1/training/endpoints/{endpoint_id}/models/{ref:path}"): [
        {"path": "/v1/training/endpoints/{endpoint}/models/b/tiny-smollm2:v1", "expect": "hidden"}
    ],
    ("GET", "/v1/training/endpoints/{endpoint_id}/openai/v1/models"): [
        {"path": "/v1/training/endpoints/{endpoint}/openai/v1/models", "expect": "hidden"}
    ],
    ("POST", "/v1/training/endpoints/{endpoint_id}/openai/v1/chat/completions"): [
        {"path": "/v1/training/endpoints/{endpoint}/openai/v1/chat/completions",
         "json": {"messages": [{"role": "user", "content": "hi"}]}, "expect": "hidden"},
    ],
    # OpenAI's fine-tuning API (issue 51): b's file and job are hidden from a's token
    ("POST", "/v1/files"): [
        {"path": "/v1/files", "files": {"file": ("a.jsonl", OAI_ROWS)},
         "data": {"purpose": "fine-tune"}, "expect": "own"},
    ],
    ("GET", "/v1/files"): [{"path": "/v1/files", "expect": "list"}],
    ("GET", "/v1/files/{file_id}"): [{"path": "/v1/files/{b_file}", "expect": "oai-hidden"}],
    ("GET", "/v1/files/{file_id}/content"): [
        {"path": "/v1/files/{b_file}/content", "expect": "oai-hidden"},
    ],
    ("DELETE", "/v1/files/{file_id}"): [{"path": "/v1/files/{b_file}", "expect": "oai-hidden"}],
    ("POST", "/v1/fine_tuning/jobs"): [
        {"path": "/v1/fine_tuning/jobs", "json": {"model": TINY, "training_file": "{b_file}"},
         "expect": "oai-hidden"},
    ],
    ("GET", "/v1/fine_tuning/jobs"): [{"path": "/v1/fine_tuning/jobs", "expect": "list"}],
    ("GET", "/v1/fine_tuning/jobs/{job_id}"): [
        {"path": "/v1/fine_tuning/jobs/{b_job}", "expect": "oai-hidden"},
    ],
    ("GET", "/v1/fine_tuning/jobs/{job_id}/events"): [
        {"path": "/v1/fine_tuning/jobs/{b_job}/events", "expect": "oai-hidden"},
    ],
    ("GET", "/v1/fine_tuning/jobs/{job_id}/checkpoints"): [
        {"path": "/v1/fine_tuning/jobs/{b_job}/checkpoints", "expect": "oai-hidden"},
    ],
    **{("POST", f"/v1/fine_tuning/jobs/{{job_id}}/{action}"): [
        {"path": f"/v1/fine_tuning/jobs/{{b_job}}/{action}", "expect": "oai-hidden"}]
       for action in ("cancel", "pause", "resume")},
    ("POST", "/v1/fine_tuning/alpha/graders/validate"): [
        {"path": "/v1/fine_tuning/alpha/graders/validate", "json": {"grader": OAI_GRADER},
         "expect": "shared"},
    ],
    ("POST", "/v1/fine_tuning/alpha/graders/run"): [
        {"path": "/v1/fine_tuning/alpha/graders/run", "json": {"grader": OAI_GRADER,
         "model_sample": "x"}, "expect": "shared"},
    ],
    ("POST", "/v1/chat/completions"): [
        {"path": "/v1/chat/completions", "json": {"model": "b/tiny-smollm2:v1", "messages": []},
         "expect": "oai-hidden"},
        {"path": "/v1/chat/completions", "json": {"model": f"ft:{TINY}:b:{{b_run}}",
         "messages": []}, "expect": "oai-hidden"},
    ],
    ("POST", "/v1/training/endpoints/{endpoint_id}/openai/v1/completions"): [
        {"path": "/v1/training/endpoints/{endpoint}/openai/v1/completions",
         "json": {"prompt": "hi", "max_tokens": 1}, "expect": "hidden"},
    ],
}  # fmt: skip


def app_routes() -> set[tuple[str, str]]:
    """Every (method, path) the service answers, walked from its routers."""
    from akka_optimize.service.routers import ROUTERS, health

    routes = list(health.public_router.routes)
    for mod in ROUTERS:
        routes += mod.router.routes
    return {(m, r.path) for r in routes for m in r.methods}


def test_every_route_has_a_row() -> None:
    assert set(ROUTES) == app_routes()


def _fill(value: Any, w: World) -> Any:
    i = w.ids
    subs = {
        "{run}": i["b_run"],
        "{run_prefix}": i["b_run"][:10],
        "{a_run}": i["a_run"],
        "{endpoint}": i["b_endpoint"],
        "{evaluation}": i["b_evaluation"],
        "{comparison}": i["b_comparison"],
        "{curation}": i["b_curation"],
        "{curation_prefix}": i["b_curation"][:10],
        "{pipeline}": i["b_pipeline"],
        "{pipeline_prefix}": i["b_pipeline"][:10],
        "{comparison_prefix}": i["b_comparison"][:10],
        "{evaluation_prefix}": i["b_evaluation"][:10],
        "{endpoint_prefix}": i["b_endpoint"][:10],
        "{image}": i["b_image"],
        "{pic}": i["b_pic"],
        "{pics_object}": i["b_pics_object"],
        "{b_project_id}": i["b_project_id"],
        "{b_file}": i["b_file"],
        "{b_job}": i["b_job"],
        "{b_import}": i["b_import"],
        "{b_import_prefix}": i["b_import"][:10],
    }
    if isinstance(value, str):
        for k, v in subs.items():
            value = value.replace(k, v)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, w) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, w) for v in value]
    return value


def _request(
    w: World, case: dict[str, Any], token: str | None = None, timeout: float = 120
) -> httpx.Response:
    tok = token or (w.admin if case.get("token") == "admin" else w.tokens["a"])
    kw: dict[str, Any] = {k: _fill(case[k], w) for k in ("json", "params") if k in case}
    kw["timeout"] = timeout
    if "content" in case:
        kw["content"] = case["content"]
    if "files" in case:  # a multipart upload (OpenAI's POST /v1/files)
        kw["files"], kw["data"] = case["files"], case.get("data")
    return w.call(tok, case.get("method", "X"), _fill(case["path"], w), **kw)


CASES = [
    pytest.param({**case, "method": method}, id=f"{method} {case['path']}#{n}")
    for (method, _), cases in ROUTES.items()
    for n, case in enumerate(cases)
]


@pytest.mark.parametrize("case", CASES)
def test_a_token_of_project_a_never_reaches_project_b(world: World, case: dict[str, Any]) -> None:
    r = _request(world, case)
    expect = case["expect"]
    body = r.text
    if expect == "hidden":
        assert r.status_code == 404, body
        assert r.json()["error"]["code"] == "not_found"
    elif expect == "oai-hidden":  # OpenAI's routes answer a 404 in OpenAI's error shape
        assert r.status_code == 404, body
        assert r.json()["error"]["type"] == "invalid_request_error", body
    elif expect.startswith("forbid:"):
        action = ACTION + expect.split(":", 1)[1]
        assert r.status_code == 403, body
        err = r.json()["error"]
        assert err["details"]["action"] == action and action in err["message"], err
    elif expect.startswith("refused:"):
        assert r.status_code == int(expect.split(":")[1]), body
        assert "not in the registry" in body or "No run" in body, body
    elif expect == "list":
        assert r.status_code == 200, body
        _no_b(world, body)
    else:  # shared or own: not project b's data, and no refusal
        assert r.status_code not in (401, 403, 404), body
        _no_b(world, body)


def _no_b(world: World, body: str) -> None:
    """Nothing of project b in an answer (a refusal may quote what the caller sent)."""
    for marker in world.b_markers():
        assert marker not in body, (marker, body)


HIDDEN_READS = [
    c
    for c in CASES
    if c.values[0]["expect"] in ("hidden", "oai-hidden")
    and c.values[0]["method"] == "GET"
    and "{a_run}" not in c.values[0]["path"]
]


@pytest.mark.parametrize("case", HIDDEN_READS)
def test_what_a_cannot_see_is_there_for_b(world: World, case: Any) -> None:
    """The 404s above are not vacuous: project b's own token reads every one of them,
    except a stored blob that is not an image, which nobody reads by digest."""
    # The endpoint's OpenAI routes answer once b's serving worker is READY (the service
    # starts it for the request if it is not): a timeout far past what a loaded machine
    # needs to start the tiny model, so the request waits for the worker, not the clock.
    r = _request(world, case, token=world.tokens["b"], timeout=600)
    if "{pics_object}" in case["path"]:
        assert r.status_code == 404
    elif "endpoints/{endpoint}/openai" in case["path"]:
        assert r.status_code == 200, r.text
        base = f"{TINY_MODEL}:v1"  # the base model first, then b's adapter on it
        models = [(m["id"], m["parent"]) for m in r.json()["data"]]
        assert models == [(base, None), ("b/tiny-smollm2:v1", base)], r.text
    elif "/compare" in case["path"]:  # reached: b's run is refused as its own baseline
        assert r.status_code == 400 and "its own baseline" in r.text, r.text
    elif case["path"] == "/v1/training/capacity":
        assert r.status_code == 200 and [p["projectName"] for p in r.json()["projects"]] == ["b"]
    elif "params" in case and case["params"].get("project") == "b":
        assert r.status_code == 200 and world.ids["b_endpoint"] in r.text
    else:
        assert r.status_code == 200, r.text


def test_lists_show_a_its_own_objects(world: World) -> None:
    a = world.tokens["a"]
    assert [p["name"] for p in world.ok(a, "GET", "/v1/training/projects")["projects"]] == ["a"]
    assert [r["id"] for r in world.ok(a, "GET", "/v1/training/runs")["runs"]] == [
        world.ids["a_run"]
    ]
    names = [i["name"] for i in world.ok(a, "GET", "/v1/registry/datasets")["items"]]
    assert set(names) - {"a/openai-files"} == {"a/train"}  # the former: POST /v1/files's row
    models = [i["name"] for i in world.ok(a, "GET", "/v1/registry/models")["items"]]
    assert models == [TINY_MODEL]  # base models are shared
    admin_runs = world.ok(world.admin, "GET", "/v1/training/runs")["runs"]
    job_run = world.ids["b_job"].removeprefix("ftjob-")  # b's fine-tuning job is a run
    assert {r["id"] for r in admin_runs} == {world.ids["a_run"], world.ids["b_run"], job_run}


def test_refused_requests_changed_nothing_of_b(world: World) -> None:
    b = world.tokens["b"]
    run = world.ok(b, "GET", f"/v1/training/runs/{world.ids['b_run']}")
    assert run["state"] == "SUCCEEDED"
    versions = world.ok(b, "GET", "/v1/registry/datasets/b/train/versions")["items"]
    assert [v["version"] for v in versions] == ["v1"]
    model = world.ok(b, "GET", "/v1/registry/models/b/tiny-smollm2")
    dataset = world.ok(b, "GET", "/v1/registry/datasets/b/train")
    assert "champion" not in json.dumps(model) and "champion" not in json.dumps(dataset)
    assert '"owner"' not in json.dumps(model)
    assert world.call(b, "GET", "/v1/registry/datasets/b/new").status_code == 404
    ep = world.ok(b, "GET", f"/v1/training/endpoints/{world.ids['b_endpoint']}")
    assert ep["state"] != "DELETED"
    ev = world.ok(b, "GET", f"/v1/training/evaluations/{world.ids['b_evaluation']}")
    assert ev["state"] != "CANCELLED"
    cmp = world.ok(b, "GET", f"/v1/training/comparisons/{world.ids['b_comparison']}")
    assert cmp["state"] != "CANCELLED"
    names = [p["name"] for p in world.ok(world.admin, "GET", "/v1/training/projects")["projects"]]
    assert names == ["a", "b"]


def test_images_are_read_only_by_their_projects_and_never_as_other_blobs(world: World) -> None:
    b, admin = world.tokens["b"], world.admin
    assert world.call(b, "GET", f"/v1/registry/images/{world.ids['b_image']}").content == PNG
    assert world.call(b, "GET", f"/v1/registry/images/{world.ids['b_pic']}").content == PIC_PNG
    assert world.call(admin, "GET", f"/v1/registry/images/{world.ids['b_image']}").content == PNG
    for token in (b, admin):
        r = world.call(token, "GET", f"/v1/registry/images/{world.ids['b_pics_object']}")
        assert r.status_code == 404 and "not in the registry" in r.text


# -- tokens ------------------------------------------------------------------------------
def test_tokens_are_stored_hashed(world: World) -> None:
    home = world.svc.home
    token = world.tokens["a"]
    rows = cluster_stores.state_rows(home, "SELECT * FROM api_tokens")
    hashes = [r[0] for r in cluster_stores.state_rows(home, "SELECT token_sha256 FROM api_tokens")]
    assert hashlib.sha256(token.encode()).hexdigest() in hashes
    assert not any(token in str(cell) for row in rows for cell in row)
    for path in home.glob("state.db*"):
        assert token.encode() not in path.read_bytes(), path


def test_token_list_and_revoke(world: World) -> None:
    svc = world.svc
    token = svc.create_token("a")
    assert world.call(token, "GET", "/v1/training/projects").status_code == 200
    listed = json.loads(svc.cli("server", "token", "list", "-o", "json", check=True).stdout)
    mine = [t for t in listed if t["project"] == "a" and t["revokedAt"] is None]
    assert len(mine) == 2 and all("sha256" not in json.dumps(t) for t in listed)
    assert token not in json.dumps(listed)
    issued = {t["id"] for t in mine}
    ((new_id,),) = cluster_stores.state_rows(
        svc.home,
        "SELECT id FROM api_tokens WHERE token_sha256 = :digest",
        digest=hashlib.sha256(token.encode()).hexdigest(),
    )
    assert new_id in issued
    out = svc.cli("server", "token", "revoke", new_id[:12], check=True)
    assert f"Revoked token {new_id}" in out.stdout
    r = world.call(token, "GET", "/v1/training/projects")
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    listed = json.loads(svc.cli("server", "token", "list", "-o", "json", check=True).stdout)
    assert [t["revokedAt"] is not None for t in listed if t["id"] == new_id] == [True]
    # The other token of project a still works.
    assert world.call(world.tokens["a"], "GET", "/v1/training/projects").status_code == 200
    bad = svc.cli("server", "token", "revoke", "ffffffffffff")
    assert bad.returncode == 1 and "No issued token" in bad.stderr


def test_a_token_for_a_missing_project_is_refused_at_creation(world: World) -> None:
    out = world.svc.cli("server", "token", "create", "--project", "nosuch", env=_home_env(world))
    assert out.returncode == 1
    assert "No training project 'nosuch'" in out.stderr and out.stdout == ""


def _home_env(w: World) -> dict[str, str]:
    from helpers import base_env

    return base_env(w.svc.home, w.svc.config_dir)


def test_the_api_document_and_its_pages_need_a_token(world: World) -> None:
    for path in ("/openapi.json", "/docs", "/redoc"):
        r = httpx.get(world.svc.url + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", path
    spec = world.ok(world.tokens["a"], "GET", "/openapi.json")
    assert "/v1/training/runs" in spec["paths"] and "/openapi.json" not in spec["paths"]
    page = world.call(world.tokens["a"], "GET", "/docs").text
    assert "SwaggerUIBundle" in page and '"/v1/training/runs"' in page


def test_the_readme_action_table_lists_the_refusals_a_token_meets() -> None:
    """The README's table names exactly the actions some case above sees refused with 403;
    the other actions (cancel and control of objects the token cannot see) are named in
    the paragraph after it, so no action is undocumented."""
    from akka_optimize.core.access.rules import ACTIONS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = set(re.findall(r"^\| `optimize\.training\.projects\.([\w.]+)` \|", readme, re.M))
    forbidden = {
        c["expect"].split(":", 1)[1]
        for cases in ROUTES.values()
        for c in cases
        if c["expect"].startswith("forbid:")
    }
    assert forbidden <= table, sorted(forbidden - table)
    assert table <= set(ACTIONS), sorted(table - set(ACTIONS))
    rest = set(ACTIONS) - table
    paragraph = readme[readme.index("Cancelling or resuming another project's") :][:600]
    assert all(f"`{a}`" in paragraph for a in rest), sorted(rest)


def test_a_recipe_reads_no_path_outside_the_declared_folders(
    world: World, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> None:
    """Issue 48 item 2: ``data.path`` / ``model.path`` outside ``service.recipeRoots`` (an
    absolute path outside, ``..`` out of a root, a link inside pointing out, a missing file)
    are refused with one sentence that quotes nothing and does not tell existing from
    missing; a file inside is taken."""
    from minifield.minifield_kit import recipe_doc, write_rows

    secret = Path(world.svc.home) / "secret.jsonl"  # the service's home: under no root
    tmp_path = recipe_root(tmp_path_factory) / "paths"
    tmp_path.mkdir()
    secret.write_text('{"token": "the service\'s secret"}\n')
    (tmp_path / "out.jsonl").symlink_to(secret)
    (tmp_path / "model").symlink_to(Path(world.svc.home))
    rows = write_rows(tmp_path / "rows.jsonl")
    (tmp_path / "sub").mkdir()
    a = world.tokens["a"]

    def submit(part: str, path: str) -> httpx.Response:
        doc = recipe_doc(tiny_model_dir, max_steps=1) | {"data": {"path": str(rows)}}
        doc[part] = {**doc[part], "path": path}
        return world.call(a, "POST", "/v1/training/recipes", json={"project": "a", "recipe": doc})

    climb = str(tmp_path) + "/.." * len(tmp_path.parts) + str(secret)
    for part, kind, paths in (
        ("data", "file", [str(secret), climb, str(tmp_path / "out.jsonl"), "/etc/passwd",
                          str(tmp_path / "missing.jsonl"), str(tmp_path)]),
        ("model", "folder", [str(world.svc.home), str(tmp_path / "model"), "/nothing/here",
                             str(rows)]),
    ):  # fmt: skip
        for path in paths:
            r = submit(part, path)
            assert r.status_code == 400, (path, r.text)
            err = r.json()["error"]
            assert (err["field"], err["message"]) == (
                f"{part}.path",
                f"{part}.path is not a {kind} under the folders this service reads recipes "
                "from (service.recipeRoots in its deployment file); name one inside them, by "
                "a path whose links stay inside.",
            ), path
    taken = submit("data", str(tmp_path / "sub" / ".." / "rows.jsonl"))
    assert taken.status_code == 201, taken.text
    assert taken.json()["dataset"] == str(rows.resolve())


def test_a_project_token_learns_no_service_path_and_no_other_project_s_digest(
    world: World,
) -> None:
    """Issue 48 item 4: ``training info`` gave a project token the home folder and the
    stores' URLs; a catalog 404 named the catalog file's absolute path; detaching another
    project's model version from one's own endpoint answered with that version's digest."""
    a = world.tokens["a"]
    info = world.ok(a, "GET", "/v1/training/info")
    assert (info["home"], info["stateStore"]["url"], info["blobStore"]["url"]) == (None,) * 3
    assert info["stateStore"]["kind"] in ("sqlite", "postgresql")
    assert world.ok(world.admin, "GET", "/v1/training/info")["home"] == str(world.svc.home)

    r = world.call(a, "POST", "/v1/training/base-models", json={"repository": "acme/unknown-7b"})
    assert r.status_code == 404, r.text
    message = r.json()["error"]["message"]
    assert "not in this deployment's base-model catalog (catalog.yaml)" in message
    assert "/" + "src" not in message and str(world.svc.home) not in message

    ep = world.ok(a, "POST", "/v1/training/endpoints", json={"model": TINY, "project": "a"})
    try:
        listing = world.call(world.admin, "GET", "/v1/registry/models/b/tiny-smollm2/versions")
        digests = set(re.findall(r"[0-9a-f]{64}", listing.text))
        assert digests, listing.text
        theirs = world.call(
            a, "DELETE", f"/v1/training/endpoints/{ep['id']}/models/b/tiny-smollm2:v1"
        )
        missing = world.call(
            a, "DELETE", f"/v1/training/endpoints/{ep['id']}/models/b/nothing-here:v1"
        )
        assert theirs.status_code == missing.status_code == 404, theirs.text
        assert theirs.json()["error"]["message"] == "Model b/tiny-smollm2 is not in the registry."
        assert not [d for d in digests if d in theirs.text]
    finally:
        world.call(a, "DELETE", f"/v1/training/endpoints/{ep['id']}")
