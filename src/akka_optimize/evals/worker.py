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

from ..errors import AkkaError
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


class JudgeUnavailable(AkkaError):
    """The judge's endpoint could not start (or the service refused to serve it): the
    evaluation fails with this sentence rather than scoring every example as an error."""

    code = "judge_unavailable"


def ask_judge(
    events: Any, grader: dict[str, Any], body: dict[str, Any]
) -> tuple[str | None, str | None]:
    """Send one chat completion ``body`` to the evaluation's ``model:`` judge, through the
    service (``…/attempts/N/judge/chat/completions``); ``(reply, None)`` or ``(None,
    reason)`` when this one request failed.

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """
    import httpx

    try:
        r = events.post("judge/chat/completions", body)
    except httpx.HTTPError as exc:
        return None, f"the judge's endpoint did not answer: {exc}"
    if r.status_code != 200:
        try:
            err = r.json().get("error") or {}
        except ValueError:
            err = {"message": r.text[-300:]}
        message = str(err.get("message") or f"HTTP {r.status_code}")
        if err.get("code") in ("endpoint_failed", "judge_unavailable") or r.status_code in (
            401,
            403,
            404,
            409,
        ):
            raise JudgeUnavailable(f"The judge {grader['judgeModel']} could not serve: {message}")
        return None, f"the judge's endpoint refused the request: {message}"
    return (r.json()["choices"][0]["message"].get("content") or "").strip(), None


def _open_judge(events: Any, grader: dict[str, Any], count: int) -> None:
    """Ask the service for the judge's endpoint (created and started when needed) and
    report it in the evaluation's phase.

    Raises:
        JudgeUnavailable: the service refused (the run has no judge, the project is gone).
    """
    r = events.post("judge", {})
    if r.status_code != 200:
        try:
            message = (r.json().get("error") or {}).get("message") or r.text[-300:]
        except ValueError:
            message = r.text[-300:]
        raise JudgeUnavailable(f"The judge {grader['judgeModel']} has no endpoint: {message}")
    endpoint = r.json()
    events.send(
        {
            "type": "phase",
            "phase": "RUNNING",
            "detail": f"grading {count} answers with the judge {grader['judgeModel']} on "
            f"endpoint {endpoint['id'][:8]} ({str(endpoint['state']).lower()})",
            "judgeEndpoint": endpoint["id"],
        }
    )


def _in_parallel(
    count: int, concurrency: int, one: Callable[[int], Any], stop: Callable[[], bool]
) -> list[Any]:
    out: list[Any] = [None] * count

    def run(i: int) -> None:
        if not stop():
            out[i] = one(i)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(run, range(count)))
    return out


def judge_all(
    events: Any,
    grader: dict[str, Any],
    examples: list[EvalRow],
    answers: list[str],
    *,
    concurrency: int,
    stop: Callable[[], bool],
    announce: bool = True,
) -> list[Any]:
    """Score ``answers[i]`` (to ``examples[i]``) with the judge
    (:func:`akka_optimize.evals.judges.judge_messages`), ``concurrency`` requests in flight
    so the judge's endpoint batches them; one :class:`~.sandbox.GradeResult` each, whose
    details keep the judge's reply. An example left unscored because ``stop()`` turned
    true scores as an error. ``announce`` first asks the service for the judge's endpoint
    (once per job: a reinforcement run's later updates reuse it).

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """
    from .judges import judge_messages, judge_request, parse_score
    from .sandbox import GradeResult

    if announce:
        _open_judge(events, grader, len(answers))

    def one(i: int) -> Any:
        ex = examples[i]
        msgs = judge_messages(grader["instructions"], ex.prompt, ex.ground_truth, answers[i])
        reply, error = ask_judge(events, grader, judge_request(msgs))
        if reply is None:
            return GradeResult(None, {}, error)
        try:
            return GradeResult(parse_score(reply), {"judgeReply": reply}, None)
        except ValueError as exc:
            return GradeResult(None, {"judgeReply": reply}, str(exc))

    got = _in_parallel(len(answers), concurrency, one, stop)
    return [g if g is not None else GradeResult(None, {}, "cancelled") for g in got]


def judge_pairs(
    events: Any,
    grader: dict[str, Any],
    examples: list[EvalRow],
    candidate: list[str],
    baseline: list[str],
    *,
    concurrency: int,
    stop: Callable[[], bool],
) -> tuple[list[Any], list[Any]]:
    """The judge picks the better answer of each pair (:func:`akka_optimize.evals.judges.pair_messages`;
    the candidate is ``A`` on even rows, ``B`` on odd ones); the candidate's and the
    baseline's :class:`~.sandbox.GradeResult` lists (1 for the preferred answer, 0 for the
    other, 0.5 each for a tie; both an error when the reply picks nothing).

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """
    from .judges import PAIR_CHOICES, judge_request, pair_messages, parse_preference
    from .sandbox import GradeResult

    _open_judge(events, grader, 2 * len(candidate))

    def one(i: int) -> tuple[Any, Any]:
        ex = examples[i]
        first, second = (candidate[i], baseline[i]) if i % 2 == 0 else (baseline[i], candidate[i])
        msgs = pair_messages(grader["instructions"], ex.prompt, ex.ground_truth, first, second)
        reply, error = ask_judge(events, grader, judge_request(msgs, PAIR_CHOICES))
        if reply is None:
            return GradeResult(None, {}, error), GradeResult(None, {}, error)
        try:
            pick = parse_preference(reply)
        except ValueError as exc:
            bad = GradeResult(None, {"judgeReply": reply}, str(exc))
            return bad, bad
        candidate_label = "A" if i % 2 == 0 else "B"
        c = 0.5 if pick == "tie" else float(pick == candidate_label)
        details = {"judgeReply": reply, "candidateWas": candidate_label}
        return GradeResult(c, details, None), GradeResult(1.0 - c, details, None)

    cancelled = (GradeResult(None, {}, "cancelled"), GradeResult(None, {}, "cancelled"))
    got = [
        g if g is not None else cancelled
        for g in _in_parallel(len(candidate), concurrency, one, stop)
    ]
    return [g[0] for g in got], [g[1] for g in got]


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
    from ..registry import download_bundle, load_dataset_rows
    from ..serving.transformers_engine import TransformersEngine

    ev = spec.extra["evaluation"]
    sides = ev.get("sides") or [{"model": ev["model"], "adapter": ev.get("adapter")}]
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the dataset"})
    dataset = _version("dataset", spec.dataset)
    rows = load_dataset_rows(store, dataset)
    if ev.get("limit"):
        rows = rows[: int(ev["limit"])]
    examples = eval_rows(rows, dataset.pinned, f"{dataset.namespace}/{dataset.name}")
    total = len(examples) * len(sides)
    grader = ev["grader"]
    bundle_dir = None
    if grader.get("kind") != "model":
        bundle_dir = download_bundle(store, _version("bundle", grader["bundle"]), work / "bundle")

    events.send({"type": "phase", "phase": "PREPARING", "detail": "loading the model"})
    rows_at_once = int(ev.get("batchRows") or 16)
    engine = TransformersEngine(
        Path(spec.model_dir),
        device=spec.device,
        max_context=int(ev.get("maxContext") or 8192),
        max_batch_rows=rows_at_once,
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
        json.dumps(r, ensure_ascii=False) + "\n" for r in _records(examples, answers, per_side)
    )
    store.put_bytes(key, body.encode())
    events.send({"type": "progress", "completed": total, "total": total, "stage": "graded"})
    result = _result(ev, per_side)
    result["examplesKey"] = key
    result["batchSizes"] = engine.batch_sizes[:200]
    return {"type": "completed", "result": result}


def _load_sides(engine: Any, sides: list[dict[str, Any]], store: BlobStore, work: Path) -> list:
    """Load each side's adapter on ``engine``; the served name per side (None: the base)."""
    from ..jobs.blobs import download_prefix
    from ..registry import download_model_files

    names: list[str | None] = []
    for i, side in enumerate(sides):
        if side.get("adapterKey"):  # a run's snapshot (a sweep's source), not registered
            folder = download_prefix(store, side["adapterKey"], work / f"adapter-{i}")
        elif side.get("adapter"):
            folder = work / f"adapter-{i}"
            download_model_files(store, _version("model", side["adapter"]), folder)
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
    from ..serving.engine import SamplingParams

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
    from .sandbox import GraderPool

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
        bundle_dir, grader["module"], grader["function"], _limits(ev), hidden=hidden
    ) as pool:
        return pool.score(calls)


def _records(
    examples: list[Any], answers: list[list[str | None]], per_side: list[list[Any]]
) -> list[dict[str, Any]]:
    """One record per example: prompt, ground truth, and each side's answer, score,
    details and error (suffix ``A``/``B`` for a comparison, the side's index for a fan)."""
    records = []
    for ex in examples:
        rec: dict[str, Any] = {
            "index": ex.index,
            "prompt": ex.prompt,
            "groundTruth": ex.ground_truth,
        }
        for i, g in enumerate(per_side):
            got = g[ex.index]
            suffix = "" if len(per_side) == 1 else "AB"[i] if len(per_side) == 2 else str(i)
            rec[f"answer{suffix}"] = answers[i][ex.index]
            rec[f"score{suffix}"] = got.score
            rec[f"details{suffix}"] = got.details
            rec[f"error{suffix}"] = got.error
        records.append(rec)
    return records


def _result(ev: dict[str, Any], per_side: list[list[Any]]) -> dict[str, Any]:
    """The summary: an evaluation's, a comparison's paired difference (with each side's
    summary), or a sweep's fan (every branch against the source snapshot, side 0)."""
    from .stats import paired

    scores = [[g.score for g in got] for got in per_side]
    if ev.get("fan"):
        return {
            "baseline": summary(scores[0]),
            "fan": [{**summary(s), "vsSource": paired(s, scores[0])} for s in scores[1:]],
        }
    if len(per_side) == 1:
        return summary(scores[0])
    result = paired(scores[0], scores[1])
    result["candidate"] = summary(scores[0])
    result["baseline"] = summary(scores[1])
    return result
