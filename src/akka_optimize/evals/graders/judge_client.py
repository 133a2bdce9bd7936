"""A worker's side of a ``model:`` judge: its endpoint, one request, and many in parallel.

Everything goes through the service (``…/attempts/N/judge``): :func:`_open_judge` asks for
the judge's endpoint, :func:`ask_judge` sends one chat completion, :func:`judge_all` scores
answers and :func:`judge_pairs` picks the better of each pair, many requests in flight so
the endpoint batches them. :class:`JudgeUnavailable` ends the job when the endpoint cannot
serve.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...errors import AkkaError
from ..rows import EvalRow
from ..sandbox.pool import GradeResult
from .judges import (
    PAIR_CHOICES,
    judge_messages,
    judge_request,
    pair_messages,
    parse_preference,
    parse_score,
)


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


def open_judge(events: Any, grader: dict[str, Any], count: int) -> None:
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
    (:func:`akka_optimize.evals.graders.judges.judge_messages`), ``concurrency`` requests in flight
    so the judge's endpoint batches them; one :class:`~.sandbox.GradeResult` each, whose
    details keep the judge's reply. An example left unscored because ``stop()`` turned
    true scores as an error. ``announce`` first asks the service for the judge's endpoint
    (once per job: a reinforcement run's later updates reuse it).

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """

    if announce:
        open_judge(events, grader, len(answers))

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
    """The judge picks the better answer of each pair (:func:`akka_optimize.evals.graders.judges.pair_messages`;
    the candidate is ``A`` on even rows, ``B`` on odd ones); the candidate's and the
    baseline's :class:`~.sandbox.GradeResult` lists (1 for the preferred answer, 0 for the
    other, 0.5 each for a tie; both an error when the reply picks nothing).

    Raises:
        JudgeUnavailable: the judge's endpoint failed to start or was refused.
    """

    open_judge(events, grader, 2 * len(candidate))

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
