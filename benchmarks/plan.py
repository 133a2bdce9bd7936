"""Plan benchmark: dry-run latency (p50) on a full plan.

- ``plan.resolve_p50``: in-process :func:`akka_optimize.plan.resolve_plan` plus the
  dry-run report on a supervised plan stating a field of every group (4 x H100, Gemma 4
  E4B, engine and memory settings), with an in-memory environment. Baseline: a JSON
  round trip (``json.loads(json.dumps(plan))``) of the same plan, the least any handler
  must do with it. ratio = ours / baseline (how many round trips one resolution costs).
- ``plan.dry_run_http_p50``: ``POST /v1/training/runs?dryRun=true`` of that plan on a
  real ``akka-optimize server start`` (project and dataset registered, catalog and
  registry lookups real). Baseline: ``GET /healthz`` on the same service (the HTTP and
  auth-free floor). ratio = ours / baseline.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PLAN: dict[str, Any] = {
    "kind": "run",
    "project": "triage",
    "baseModel": "google/gemma-4-E4B-it",
    "config": {
        "dataset": "triage/train",
        "method": "sft",
        "hyperparams": {
            "lora": {"rank": 32, "alpha": 64.0, "dropout": 0.1},
            "optimizer": {"kind": "adamw", "learningRate": 1e-4, "weightDecay": 0.05},
            "scheduler": {"kind": "cosine", "warmupRatio": 0.05, "minLearningRateRatio": 0.1},
            "training": {"epochs": 2, "microBatchPerGpu": 2, "gradientAccumulation": 4},
        },
        "maxSeqLength": 4096,
        "model": {"precision": "bf16", "weightPrecision": "bf16", "gradientCheckpointing": True},
        "data": {"validationDataset": "triage/train", "use_dynamic_bsz": True},
        "loss": {"assistantTurns": "all", "trainOnToolCalls": True},
        "engineSettings": {"head.chunk_tokens": 256, "checks.reference.max_logprob_error": 0.1},
    },
    "execution": {
        "gpus": 4,
        "deviceProfile": "H100",
        "hostMemoryGiB": 96,
        "memory": {"offload": {"optimizer": True}, "sharding": "none"},
    },
}


class _Env:
    """An in-memory environment: the shipped deployment and catalog, one project."""

    def __init__(self) -> None:
        from akka_optimize.catalog import load_catalog
        from akka_optimize.core.plans import catalog_view
        from akka_optimize.deployment import load_deployment

        self.deployment = load_deployment()
        self.cuda_available = False
        self._catalog = load_catalog(self.deployment)
        self._view = catalog_view

    def project_exists(self, name: str) -> bool:
        return name == "triage"

    def resolve_dataset(self, ref: str, project: str) -> str:
        from akka_optimize.refs import parse_ref

        return f"{parse_ref(ref, project).repo}:v1@sha256:{'0' * 64}"

    def resolve_artifact(self, kind: str, ref: str, project: str) -> str:
        return self.resolve_dataset(ref, project)

    def catalog_entry(self, repository: str) -> Any:
        e = self._catalog.get(repository)
        return self._view(e) if e is not None else None


def _p50(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000.0


def _in_process(n: int) -> dict[str, Any]:
    from akka_optimize.plan import resolve_plan
    from akka_optimize.plan.dryrun import dry_run_report

    env = _Env()
    ours = _p50(lambda: dry_run_report(resolve_plan(copy.deepcopy(PLAN), env)), n)
    base = _p50(lambda: json.loads(json.dumps(PLAN)), n)
    return {
        "name": "plan.resolve_p50",
        "value": round(ours, 4),
        "unit": "ms",
        "baseline": round(base, 4),
        "ratio": round(ours / base, 2),
        "detail": "resolve_plan + dry-run report vs JSON round trip of the plan",
    }


def _over_http(n: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from helpers import LiveService, free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    svc = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port()).start()
    try:
        svc.api("POST", "/v1/training/projects", json={"name": "triage"})
        row = {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
        }
        svc.api("POST", "/v1/registry/datasets/triage/train", content=json.dumps(row).encode())

        def dry() -> None:
            r = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=PLAN)
            if r.status_code != 200:
                raise RuntimeError(f"dry run refused: {r.text[:500]}")

        ours = _p50(dry, n)
        base = _p50(lambda: svc.api("GET", "/healthz"), n)
    finally:
        svc.stop()
    return {
        "name": "plan.dry_run_http_p50",
        "value": round(ours, 3),
        "unit": "ms",
        "baseline": round(base, 3),
        "ratio": round(ours / base, 2),
        "detail": "POST /v1/training/runs?dryRun=true vs GET /healthz on the same service",
    }


def run(quick: bool) -> list[dict]:
    """Measure dry-run latency; see the module docstring."""
    return [_in_process(200 if quick else 2000), _over_http(20 if quick else 200)]


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(r)
