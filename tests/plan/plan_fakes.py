"""A fake :class:`PlanEnvironment` for testing resolution without a service: the shipped
deployment, project ``triage``, dataset ``triage/train`` (v1) and a small catalog."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from akka_optimize.deployment import Deployment, load_deployment
from akka_optimize.errors import NotFound
from akka_optimize.plan import CatalogEntryView
from akka_optimize.refs import parse_ref

CASES = Path(__file__).resolve().parents[1] / "cases"

CATALOG = {
    "huggingfacetb/smollm2-135m-instruct": CatalogEntryView(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "llama",
        "135M",
        8192,
        {"cpu": 4096, "H100": 32768, "H200": 65536},
    ),
    "google/gemma-4-e4b-it": CatalogEntryView(
        "google/gemma-4-E4B-it", "gemma4", "E4B", None, {"H100": 8192, "H200": 16384}
    ),
    "google/gemma-4-12b-it": CatalogEntryView(
        "google/gemma-4-12B-it", "gemma4", "12B", None, {"H100": 4096, "H200": 8192}
    ),
}


def digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


@dataclass
class FakeEnv:
    """Projects, datasets and catalog entries held in dictionaries."""

    deployment: Deployment = field(default_factory=load_deployment)
    cuda_available: bool = False
    projects: set[str] = field(default_factory=lambda: {"triage"})
    datasets: dict[str, int] = field(default_factory=lambda: {"triage/train": 1, "triage/val": 2})
    models: dict[str, int] = field(default_factory=lambda: {"triage/sft": 3})
    calls: list[tuple[str, str]] = field(default_factory=list)

    def project_exists(self, name: str) -> bool:
        return name in self.projects

    def _pin(self, table: dict[str, int], ref: str, project: str, kind: str) -> str:
        r = parse_ref(ref, project)
        self.calls.append((kind, ref))
        if r.repo not in table:
            raise NotFound(f"{kind} {r.repo} is not in the registry.")
        v = table[r.repo]
        return f"{r.repo}:v{v}@{digest(r.repo)}"

    def resolve_dataset(self, ref: str, project: str) -> str:
        return self._pin(self.datasets, ref, project, "dataset")

    def resolve_artifact(self, kind: str, ref: str, project: str) -> str:
        return self._pin(self.models if kind == "model" else {}, ref, project, kind)

    def catalog_entry(self, repository: str) -> CatalogEntryView | None:
        return CATALOG.get(repository.lower())


def load_cases(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (CASES / name).read_text().splitlines() if line.strip()]


SEED_040_PLAN: dict[str, Any] = {
    "kind": "run",
    "project": "triage",
    "baseModel": "google/gemma-4-E4B-it",
    "config": {
        "dataset": "triage/train",
        "method": "sft",
        "hyperparams": {
            "lora": {"rank": 16},
            "optimizer": {"learningRate": 0.0001, "weightDecay": 0.05},
            "scheduler": {"kind": "cosine", "warmupRatio": 0.05, "minLearningRateRatio": 0.1},
            "training": {"epochs": 4, "microBatchPerGpu": 2, "gradientAccumulation": 4},
        },
        "maxSeqLength": 2048,
        "model": {"precision": "bf16"},
    },
    "execution": {"gpus": 1, "deviceProfile": "H100"},
}
"""seeds/000's example plan with ``workload`` renamed ``project`` and the dataset made a
registry reference (seeds/001 breaking changes)."""


FULL_SFT_PLAN: dict[str, Any] = {
    "kind": "run",
    "project": "triage",
    "baseModel": "google/gemma-4-E4B-it",
    "modelName": "triage-e4b",
    "submissionId": "sub-1",
    "smoke": False,
    "config": {
        "dataset": "triage/train",
        "method": "sft",
        "hyperparams": {
            "lora": {"rank": 32, "alpha": 64.0, "dropout": 0.1},
            "optimizer": {
                "kind": "adamw",
                "learningRate": 1e-4,
                "weightDecay": 0.05,
                "maxGradNorm": 1.0,
            },
            "scheduler": {"kind": "cosine", "warmupRatio": 0.05, "minLearningRateRatio": 0.1},
            "training": {
                "epochs": 2,
                "microBatchPerGpu": 2,
                "gradientAccumulation": 4,
                "validationFrequencySteps": 50,
                "validateEachEpoch": True,
                "validationBatchSize": 16,
                "tokensPerGpu": 8192,
                "seed": 7,
            },
        },
        "maxSeqLength": 4096,
        "model": {
            "precision": "bf16",
            "weightPrecision": "bf16",
            "gradientCheckpointing": True,
            "attentionImplementation": "flex_attention",
        },
        "data": {"validationDataset": "triage/val", "use_dynamic_bsz": True},
        "loss": {"assistantTurns": "all", "trainOnToolCalls": True, "trainOnToolResults": False},
        "engineSettings": {
            "head.chunk_tokens": 256,
            "engine.pad_to_length_bucket": 512,
            "kernels.liger.rms_norm": True,
            "checks.reference.max_logprob_error": 0.1,
            "dtypes.reduce": "bf16",
        },
    },
    "execution": {
        "gpus": 4,
        "deviceProfile": "H100",
        "hostMemoryGiB": 96,
        "keepRecoverable": 3,
        "saveEachEpoch": True,
        "memory": {"offload": {"optimizer": True}, "sharding": "none"},
    },
}
"""A supervised plan on 4 H100s stating a field of every group (accepted by the fakes)."""


def _laid_over(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            _laid_over(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def resolved_plan(
    gpus: int = 1, method: str = "sft", over: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A plan on SmolLM2 resolved against :class:`FakeEnv` (``gpus`` devices: the ``cpu``
    profile for one, ``H100`` for more), with ``over`` laid over the resolved descriptor
    key by key: a resolved plan as a run record keeps it, whatever a test sets (the plan
    rules are not asked again)."""
    from akka_optimize.plan import resolve_plan

    plan = {
        "kind": "run",
        "project": "triage",
        "baseModel": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "config": {"dataset": "triage/train", "method": method},
        "execution": {"gpus": gpus},
    }
    return _laid_over(resolve_plan(plan, FakeEnv()).plan, over or {})
