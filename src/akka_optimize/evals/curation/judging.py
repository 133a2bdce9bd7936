"""What a worker does for a curation: the judge scores every row, the keep rule picks.

:func:`curate` is the ``curate`` kind's worker function
(:mod:`akka_optimize.evals.curation.kind`): :func:`judge_rows` asks the judge about every row
(:func:`curation_messages`), :func:`akka_optimize.evals.curation.request.kept_rows` picks the
rows, and both files go to the blob store for the service to register.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...jobs.spec import JobSpec
from ...registry import load_dataset_rows
from ...registry.datasets import canonical_line
from ...store import BlobStore
from ...testhooks import hold
from ..graders.judge_client import ask_judge, open_judge
from ..graders.judges import MAX_SCORE, conversation_text, judge_request, parse_score
from ..rows import content_text
from ..sandbox.pool import GradeResult
from ..summaries import summary
from ..worker import worker_version
from .request import Keep, kept_rows

PROGRESS_EVERY = 8
"""Rows scored between two progress events."""


def curation_messages(instructions: str, row: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages that ask a judge to score one row: the conversation before its
    last assistant message, then that answer, asking for a whole number from 0 to 10.

    Args:
        instructions: from :func:`curation_instructions`.
        row: a parsed conversation row that ends with an assistant message.
    """

    messages = row.get("messages") or []
    answer = content_text(messages[-1].get("content")) if messages else ""
    user = (
        f"Conversation:\n{conversation_text(messages[:-1])}\n\n"
        f"Final assistant answer:\n{answer}\n\n"
        f"Score the answer from 0 to {MAX_SCORE}; reply with the number only."
    )
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]


def judge_rows(
    events: Any,
    grader: dict[str, Any],
    rows: list[dict[str, Any]],
    *,
    concurrency: int,
    stop: Callable[[], bool],
    on_scored: Callable[[int], None],
) -> list[Any]:
    """Score every row with the judge, ``concurrency`` requests in flight so its endpoint
    batches them; one :class:`~.sandbox.GradeResult` per row (details keep the judge's
    reply). A row left unscored because ``stop()`` turned true is an error ``cancelled``.

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """

    out: list[Any] = [GradeResult(None, {}, "cancelled")] * len(rows)
    done = [0]
    lock = threading.Lock()

    def one(i: int) -> None:
        if stop():
            return
        msgs = curation_messages(grader["instructions"], rows[i])
        reply, error = ask_judge(events, grader, judge_request(msgs))
        if reply is None:
            out[i] = GradeResult(None, {}, error)
        else:
            try:
                out[i] = GradeResult(parse_score(reply), {"judgeReply": reply}, None)
            except ValueError as exc:
                out[i] = GradeResult(None, {"judgeReply": reply}, str(exc))
        with lock:
            done[0] += 1
            n = done[0]
        on_scored(n)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(one, range(len(rows))))
    return out


def curate(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """The worker function of curations: the judge scores every row, the keep rule picks
    the rows, both files go to the blob store (``runs/ID/curation/``) and the ``completed``
    event names them; the service registers them (:func:`_completed`)."""

    cu = spec.extra["curation"]
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the source dataset"})
    source = worker_version("dataset", spec.dataset)
    rows = load_dataset_rows(store, source)
    if cu.get("limit"):
        rows = rows[: int(cu["limit"])]
    n = len(rows)
    grader = cu["grader"]
    hold("curating")  # tests only: stop before the judge is asked
    events.send({"type": "progress", "completed": 0, "total": n, "stage": "judging"})
    open_judge(events, grader, n)

    def scored(k: int) -> None:
        if k % PROGRESS_EVERY == 0 or k == n:
            events.send({"type": "progress", "completed": k, "total": n, "stage": "judging"})

    graded = judge_rows(
        events, grader, rows, concurrency=16, stop=lambda: events.control == "cancel",
        on_scored=scored,
    )  # fmt: skip
    if events.control == "cancel":
        return {"type": "cancelled"}
    scores = [g.score for g in graded]
    keep = Keep(**cu["keep"])
    kept = kept_rows(scores, keep)
    chosen = set(kept)
    prefix = f"runs/{spec.run_id}/curation"
    store.put_bytes(f"{prefix}/kept.jsonl", b"".join(canonical_line(rows[i]) for i in kept))
    judged = []
    for i, (row, g) in enumerate(zip(rows, graded, strict=True)):
        info = {
            "row": i + 1,
            "score": g.score,
            "judgeReply": g.details.get("judgeReply"),
            "kept": i in chosen,
            "error": g.error,
        }
        judged.append({**row, "extra_info": {**(row.get("extra_info") or {}), "curation": info}})
    store.put_bytes(f"{prefix}/judge.jsonl", b"".join(canonical_line(r) for r in judged))
    result = {
        **summary(scores),
        "kept": len(kept),
        "keptKey": f"{prefix}/kept.jsonl",
        "judgeKey": f"{prefix}/judge.jsonl",
    }
    return {"type": "completed", "result": result}
