"""What a worker does for an evaluation: answer every row, grade every answer.

The ``eval`` kind's worker function (:mod:`akka_optimize.evals.kind`), run by
``python -m akka_optimize.jobs.worker SPEC.json`` outside the service. Order: rows →
bundle → engine → answers (the serving engine's batching) → grades (the sandboxed grader
pool, :mod:`akka_optimize.evals.sandbox.pool`) → the examples file in the blob store → the
``completed`` event with the summary. A cancel requested while it answers or grades ends it
``cancelled`` at the next example boundary.

Its parts: :mod:`akka_optimize.evals.graders.judge_client` (a ``model:`` judge's requests) and
:mod:`akka_optimize.evals.summaries` (the summary and the examples' records).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..jobs.blobs import download_prefix
from ..jobs.spec import JobSpec
from ..jobs.training import spec_version as version
from ..serving.engine import SamplingParams
from ..serving.transformers_engine import TransformersEngine
from ..store import BlobStore
from ..testhooks import hold
from .graders.judge_client import judge_all as judge_all
from .graders.judge_client import judge_pairs
from .rows import EvalRow, eval_rows
from .sandbox.pool import GraderPool, Limits
from .summaries import summary as summary
from .summaries import summary_records, summary_result

ADAPTER = "candidate"
"""The name the evaluated adapter is loaded under in the engine."""

PROGRESS_EVERY = 8
"""Answers (or grades) between two progress events."""


def worker_version(kind: str, record: dict[str, Any]) -> Any:

    return version(kind, record)


def prompt_ids(tokenizer: Any, row: EvalRow) -> list[int]:
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
        ids = prompt_ids(engine.tokenizer, rows[i])
        answers[i] = "".join(ev.delta for ev in engine.stream(ids, adapter, params))
        with lock:
            done[0] += 1
            n = done[0]
        on_answer(n)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(one, range(len(rows))))
    return answers


def sandbox_limits(ev: dict[str, Any]) -> Any:

    lim = ev.get("limits") or {}
    keys = ("cpu_seconds", "wall_seconds", "memory_bytes", "workers")
    return Limits(**{k: lim[k] for k in keys if k in lim})


def evaluate(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """The worker function of evaluations and comparisons (see the module docstring).

    ``spec.extra`` holds ``evaluation`` (the resolved job: ``sides``, one entry per model
    with its ``model`` and ``adapter`` record or None — one side for an evaluation, two for
    a comparison, the candidate first —, ``grader`` with its bundle record, ``sampling``,
    ``limit``, ``limits``, ``precision``: the deployment's ``serving.precision`` when the
    evaluation was created) and ``hidden`` (folders the grader must not see: the service's
    home). Every side answers every row on one engine (the sides share a base model).
    """
    from ..registry import download_bundle, load_dataset_rows  # lazy: sqlalchemy

    ev = spec.extra["evaluation"]
    sides = ev.get("sides") or [{"model": ev["model"], "adapter": ev.get("adapter")}]
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the dataset"})
    dataset = worker_version("dataset", spec.dataset)
    rows = load_dataset_rows(store, dataset)
    if ev.get("limit"):
        rows = rows[: int(ev["limit"])]
    examples = eval_rows(rows, dataset.pinned, f"{dataset.namespace}/{dataset.name}")
    total = len(examples) * len(sides)
    grader = ev["grader"]
    bundle_dir = None
    if grader.get("kind") != "model":
        bundle_dir = download_bundle(
            store, worker_version("bundle", grader["bundle"]), work / "bundle"
        )

    events.send({"type": "phase", "phase": "PREPARING", "detail": "loading the model"})
    rows_at_once = int(ev.get("batchRows") or 16)
    engine = TransformersEngine(
        Path(spec.model_dir),
        device=spec.device,
        max_context=int(ev.get("maxContext") or 8192),
        max_batch_rows=rows_at_once,
        precision=str(ev.get("precision") or "auto"),
    )
    names = _load_sides(engine, sides, store, work)
    answers = _answer_sides(engine, names, examples, ev, events, rows_at_once)
    if answers is None or events.control == "cancel":
        return {"type": "cancelled"}
    graded = _grade(spec, ev, events, examples, answers, bundle_dir, rows_at_once)
    if events.control == "cancel":
        return {"type": "cancelled"}
    n = len(examples)
    per_side = [graded[i * n : (i + 1) * n] for i in range(len(sides))]
    key = f"runs/{spec.run_id}/evaluation/examples.jsonl"
    body = "".join(
        json.dumps(r, ensure_ascii=False) + "\n"
        for r in summary_records(examples, answers, per_side)
    )
    store.put_bytes(key, body.encode())
    events.send({"type": "progress", "completed": total, "total": total, "stage": "graded"})
    result = summary_result(ev, per_side)
    result["examplesKey"] = key
    result["batchSizes"] = engine.batch_sizes[:200]
    return {"type": "completed", "result": result}


def _load_sides(engine: Any, sides: list[dict[str, Any]], store: BlobStore, work: Path) -> list:
    """Load each side's adapter on ``engine``; the served name per side (None: the base)."""
    from ..registry import download_model_files  # lazy: sqlalchemy

    names: list[str | None] = []
    for i, side in enumerate(sides):
        if side.get("adapterKey"):  # a run's snapshot (a sweep's source), not registered
            folder = download_prefix(store, side["adapterKey"], work / f"adapter-{i}")
        elif side.get("adapter"):
            folder = work / f"adapter-{i}"
            download_model_files(store, worker_version("model", side["adapter"]), folder)
        else:
            names.append(None)
            continue
        engine.load_adapter(f"{ADAPTER}-{i}", folder)
        names.append(f"{ADAPTER}-{i}")
    return names


def _answer_sides(
    engine: Any,
    names: list[str | None],
    examples: list[Any],
    ev: dict[str, Any],
    events: Any,
    rows_at_once: int,
) -> list[list[str | None]] | None:
    """Every side's answer to every example, with progress events; None when cancelled."""

    sp = ev["sampling"]
    params = SamplingParams(
        max_tokens=int(sp["maxTokens"]),
        temperature=float(sp["temperature"]),
        top_p=float(sp["topP"]),
        seed=sp.get("seed"),
    )
    n, total = len(examples), len(examples) * len(names)

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
            return None
    return answers


def _grade(
    spec: JobSpec,
    ev: dict[str, Any],
    events: Any,
    examples: list[Any],
    answers: list[list[str | None]],
    bundle_dir: Path | None,
    rows_at_once: int,
) -> list[Any]:
    """Grade every answer, side after side: a bundle in the sandbox, or a ``model:`` judge
    (a comparison's judge sees both answers of a pair)."""

    grader = ev["grader"]
    judged = grader.get("kind") == "model"
    total = len(examples) * len(answers)

    def cancelled() -> bool:
        return events.control == "cancel"

    how = f" with the judge {grader['judgeModel']} (its endpoint starts first)" if judged else ""
    events.send({"type": "phase", "phase": "RUNNING", "detail": f"grading {total} answers{how}"})
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
    if judged and len(answers) == 2:
        got_a, got_b = judge_pairs(
            events,
            grader,
            examples,
            [a or "" for a in answers[0]],
            [b or "" for b in answers[1]],
            concurrency=rows_at_once,
            stop=cancelled,
        )
        return got_a + got_b
    if judged:
        return judge_all(
            events,
            grader,
            [ex for _ in answers for ex in examples],
            [c["solution_str"] for c in calls],
            concurrency=rows_at_once,
            stop=cancelled,
        )
    assert bundle_dir is not None  # a bundle grader was downloaded by evaluate
    hidden = [Path(p) for p in spec.extra.get("hidden", [])]
    with GraderPool(
        bundle_dir, grader["module"], grader["function"], sandbox_limits(ev), hidden=hidden
    ) as pool:
        return pool.score(calls)
