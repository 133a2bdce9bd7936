"""An OpenAI grader as files the grader sandbox runs (:mod:`akka_optimize.evals.sandbox.pool`).

Two uses:

- :func:`reward_bundle`: a reinforcement job's reward. The folder holds this package's
  :mod:`.grading`, :mod:`.formula` and :mod:`.similarity` (standard library only), the grader
  as ``grader.json``, each python grader's source as ``user_N.py``, and ``reward.py`` whose
  ``compute_score(data_source, solution_str, ground_truth, extra_info)`` (veRL's signature,
  :mod:`akka_optimize.evals.rows`) grades the sampled completion against the row's
  reference fields (its ``ground_truth`` object, :mod:`.files`). A grader that fails for a
  sample raises, so the run counts it in ``rewardErrors`` (:mod:`akka_optimize.reinforcement.rewards`).
- :func:`python_bundle`: one python grader's source, called as ``grade(sample, item)`` by
  ``graders/run`` (``compute_score`` takes the sample in ``extra_info["sample"]`` and the item
  as ``ground_truth``).

Model graders (``score_model``, ``label_model``) cannot run inside the sandbox (it has no
network): a reinforcement reward is either a grader without them (this bundle) or a lone
``score_model`` grader on a registered model (:mod:`.jobs`: the platform's ``model:``
judge).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .grading import sub_graders

_HERE = Path(__file__).parent
COPIED = ("grading.py", "formula.py", "similarity.py")

_REWARD = '''"""The reward of an OpenAI grader (written by akka_optimize.core.openai_ft.bundle)."""
import importlib
import json
from pathlib import Path

import grading

GRADER = json.loads((Path(__file__).parent / "grader.json").read_text())
SOURCES = json.loads((Path(__file__).parent / "sources.json").read_text())


def _python(source, sample, item):
    module = importlib.import_module(SOURCES[source])
    try:
        return float(module.grade(sample, item))
    except Exception as exc:
        raise grading.GradeFailure("python_grader_runtime_error", f"{type(exc).__name__}: {exc}")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    item = ground_truth if isinstance(ground_truth, dict) else {"ground_truth": ground_truth}
    out = grading.grade(GRADER, solution_str or "", item, python=_python)
    failed = [k for k, v in out["metadata"]["errors"].items() if v is True]
    if failed:
        details = {k: v for k, v in out["metadata"]["errors"].items() if isinstance(v, str)}
        raise RuntimeError(f"{', '.join(failed)} {json.dumps(details)}")
    return out["reward"]
'''

_CALL = '''"""One python grader, called as OpenAI calls it (akka_optimize.core.openai_ft.bundle)."""
import user_0


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    sample = (extra_info or {}).get("sample") or {"output_text": solution_str}
    return float(user_0.grade(sample, ground_truth if isinstance(ground_truth, dict) else {}))
'''


def python_sources(g: dict[str, Any]) -> list[str]:
    """The sources of every python grader in ``g`` (itself or a multi's sub-graders)."""
    if g.get("type") == "python":
        return [g["source"]]
    if g.get("type") == "multi":
        return [s["source"] for s in sub_graders(g).values() if s.get("type") == "python"]
    return []


def has_model_grader(g: dict[str, Any]) -> bool:
    """Whether ``g`` is or holds a ``score_model`` or ``label_model`` grader."""
    kinds = {g.get("type")}
    if g.get("type") == "multi":
        kinds |= {s.get("type") for s in sub_graders(g).values()}
    return bool(kinds & {"score_model", "label_model"})


def reward_bundle(g: dict[str, Any], dest: Path) -> Path:
    """Write the reward bundle of grader ``g`` (no model grader in it) under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        (dest / name).write_text((_HERE / name).read_text())
    sources = {}
    for i, src in enumerate(python_sources(g)):
        (dest / f"user_{i}.py").write_text(src)
        sources[src] = f"user_{i}"
    (dest / "sources.json").write_text(json.dumps(sources))
    (dest / "grader.json").write_text(json.dumps(g, sort_keys=True))
    (dest / "reward.py").write_text(_REWARD)
    return dest


def python_bundle(source: str, dest: Path) -> Path:
    """Write one python grader's source and its caller (module ``call``) under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "user_0.py").write_text(source)
    (dest / "call.py").write_text(_CALL)
    return dest
