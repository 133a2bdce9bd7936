"""What a worker does for an evaluation: answer every row, grade every answer.

The ``eval`` kind's worker function (:mod:`akka_optimize.evals.kind`), run by
``python -m akka_optimize.jobs.worker SPEC.json`` outside the service. Order: rows →
bundle → engine → answers (the serving engine's batching) → grades (the sandboxed grader
pool, :mod:`akka_optimize.evals.sandbox`) → the examples file in the blob store → the
``completed`` event with the summary. A cancel requested while it answers or grades ends it
``cancelled`` at the next example boundary.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..jobs.spec import JobSpec
from ..store import BlobStore
from ..testhooks import hold
from .rows import EvalRow, eval_rows

ADAPTER = "candidate"
"""The name the evaluated adapter is loaded under in the engine."""

PROGRESS_EVERY = 8
"""Answers (or grades) between two progress events."""


def _version(kind: str, record: dict[str, Any]) -> Any:
    from ..jobs.training import _version as version

    return version(kind, record)


def summary(scores: list[float | None]) -> dict[str, Any]:
    """Mean score with its standard error over the examples that scored.

    Args:
        scores: one entry per example; None marks an example error.

    Returns:
        ``{"mean", "stderr", "count", "scored", "errors", "errorShare"}``: ``stderr`` is the
        sample standard deviation over ``sqrt(scored)`` (None below two scored examples);
        ``mean`` is None when nothing scored.
    """
    ok = [s for s in scores if s is not None]
    n = len(ok)
    mean = sum(ok) / n if n else None
    stderr = None
    if n >= 2 and mean is not None:
        var = sum((s - mean) ** 2 for s in ok) / (n - 1)
        stderr = math.sqrt(var / n)
    errors = len(scores) - n
    return {
        "mean": mean,
        "stderr": stderr,
        "count": len(scores),
        "scored": n,
        "errors": errors,
        "errorShare": errors / len(scores) if scores else 0.0,
    }


def _prompt_ids(tokenizer: Any, row: EvalRow) -> list[int]:
    kw: dict[str, Any] = {"add_generation_prompt": True, "tokenize": True}
    if row.tools:
        kw["tools"] = row.tools
    ids = tokenizer.apply_chat_template(row.prompt, **kw)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def answer_all(
    engine: Any,
    rows: list[EvalRow],
    adapter: str | None,
    params: Any,
    *,
    concurrency: int,
    on_answer: Callable[[int], None],
    stop: Callable[[], bool],
) -> list[str | None]:
    """Generate one answer per row through the engine's batching.

    ``concurrency`` requests are in flight at once, so the engine decodes them together
    (:mod:`akka_optimize.serving.batching`). Returns the answers in row order; a row left
    unanswered because ``stop()`` turned true is None.
    """
    answers: list[str | None] = [None] * len(rows)
    done = [0]
    lock = threading.Lock()

    def one(i: int) -> None:
        if stop():
            return
        ids = _prompt_ids(engine.tokenizer, rows[i])
        answers[i] = "".join(ev.delta for ev in engine.stream(ids, adapter, params))
        with lock:
            done[0] += 1
            n = done[0]
        on_answer(n)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(one, range(len(rows))))
    return answers


def _limits(ev: dict[str, Any]) -> Any:
    from .sandbox import Limits

    lim = ev.get("limits") or {}
    keys = ("cpu_seconds", "wall_seconds", "memory_bytes", "workers")
    return Limits(**{k: lim[k] for k in keys if k in lim})


def evaluate(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """The worker function of evaluations and comparisons (see the module docstring).

    ``spec.extra`` holds ``evaluation`` (the resolved job: ``sides``, one entry per model
    with its ``model`` and ``adapter`` record or None — one side for an evaluation, two for
    a comparison, the candidate first —, ``grader`` with its bundle record, ``sampling``,
    ``limit``, ``limits``) and ``hidden`` (folders the grader must not see: the service's
    home). Every side answers every row on one engine (the sides share a base model).
    """
    from ..registry import download_bundle, download_model_files, load_dataset_rows
    from ..serving.engine import SamplingParams
    from ..serving.transformers_engine import TransformersEngine
    from .sandbox import GraderPool

    ev = spec.extra["evaluation"]
    sides = ev.get("sides") or [{"model": ev["model"], "adapter": ev.get("adapter")}]
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the dataset"})
    dataset = _version("dataset", spec.dataset)
    rows = load_dataset_rows(store, dataset)
    if ev.get("limit"):
        rows = rows[: int(ev["limit"])]
    examples = eval_rows(rows, dataset.pinned, f"{dataset.namespace}/{dataset.name}")
    n = len(examples)
    total = n * len(sides)

    grader = ev["grader"]
    bundle_dir = download_bundle(store, _version("bundle", grader["bundle"]), work / "bundle")

    events.send({"type": "phase", "phase": "PREPARING", "detail": "loading the model"})
    rows_at_once = int(ev.get("batchRows") or 16)
    engine = TransformersEngine(
        Path(spec.model_dir),
        device=spec.device,
        max_context=int(ev.get("maxContext") or 8192),
        max_batch_rows=rows_at_once,
    )
    names: list[str | None] = []
    for i, side in enumerate(sides):
        if side.get("adapter"):
            folder = work / f"adapter-{i}"
            download_model_files(store, _version("model", side["adapter"]), folder)
            engine.load_adapter(f"{ADAPTER}-{i}", folder)
            names.append(f"{ADAPTER}-{i}")
        else:
            names.append(None)
    sp = ev["sampling"]
    params = SamplingParams(
        max_tokens=int(sp["maxTokens"]),
        temperature=float(sp["temperature"]),
        top_p=float(sp["topP"]),
        seed=sp.get("seed"),
    )

    def cancelled() -> bool:
        return events.control == "cancel"

    events.send({"type": "phase", "phase": "RUNNING", "detail": f"answering {total} examples"})
    hold("answering")  # tests only: stop before the first answer
    # the service's answer to this event carries a cancel requested meanwhile
    events.send({"type": "progress", "completed": 0, "total": total, "stage": "answering"})
    answers: list[list[str | None]] = []
    for i, name in enumerate(names):
        done = i * n

        def answered(k: int, done: int = done) -> None:
            if k % PROGRESS_EVERY == 0 or k == n:
                events.send(
                    {
                        "type": "progress",
                        "completed": done + k,
                        "total": total,
                        "stage": "answering",
                    }
                )

        answers.append(
            answer_all(
                engine,
                examples,
                name,
                params,
                concurrency=rows_at_once,
                on_answer=answered,
                stop=cancelled,
            )
        )
        if cancelled():
            return {"type": "cancelled"}

    events.send({"type": "phase", "phase": "RUNNING", "detail": f"grading {total} answers"})
    calls = [
        {
            "data_source": ex.data_source,
            "solution_str": side_answers[ex.index] or "",
            "ground_truth": ex.ground_truth,
            "extra_info": ex.extra_info,
        }
        for side_answers in answers
        for ex in examples
    ]
    hidden = [Path(p) for p in spec.extra.get("hidden", [])]
    with GraderPool(
        bundle_dir, grader["module"], grader["function"], _limits(ev), hidden=hidden
    ) as pool:
        graded = pool.score(calls)
    if cancelled():
        return {"type": "cancelled"}
    per_side = [graded[i * n : (i + 1) * n] for i in range(len(sides))]

    records = []
    for ex in examples:
        rec: dict[str, Any] = {
            "index": ex.index,
            "prompt": ex.prompt,
            "groundTruth": ex.ground_truth,
        }
        for i, g in enumerate(per_side):
            got = g[ex.index]
            suffix = "" if len(sides) == 1 else "AB"[i]
            rec[f"answer{suffix}"] = answers[i][ex.index]
            rec[f"score{suffix}"] = got.score
            rec[f"details{suffix}"] = got.details
            rec[f"error{suffix}"] = got.error
        records.append(rec)
    key = f"runs/{spec.run_id}/evaluation/examples.jsonl"
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    store.put_bytes(key, body)
    events.send({"type": "progress", "completed": total, "total": total, "stage": "graded"})
    if len(sides) == 1:
        result = summary([g.score for g in graded])
    else:
        from .stats import paired

        result = paired([g.score for g in per_side[0]], [g.score for g in per_side[1]])
        result["candidate"] = summary([g.score for g in per_side[0]])
        result["baseline"] = summary([g.score for g in per_side[1]])
    result["examplesKey"] = key
    result["batchSizes"] = engine.batch_sizes[:200]
    return {"type": "completed", "result": result}
