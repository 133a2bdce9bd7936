"""Curations: a ``model:`` judge scores every row of a dataset, the rows a keep rule keeps
are registered as a new dataset (seeds/001 "Datasets live in the registry": "A curation
specifies the dataset name for its registered output, such as oasst1/curated. The judge's
dataset is registered beside it, with a -judge suffix"; FEATURES F023; issue 19 item 1).

A curation is a run record whose ``method`` is ``curate`` (:mod:`akka_optimize.jobs.kinds`):
the same scheduler, states, cancel and recovery as an evaluation. Its request names:

- ``source``: the dataset to curate (a registry reference, pinned at acceptance); every
  row is a conversation that ends with an assistant message, the answer the judge scores;
- ``judge``: ``model:REFERENCE``, a base model or an adapter, served on its own endpoint
  in the project (as an evaluation's judge, :mod:`akka_optimize.evals.judges`);
- ``judgeInstructions``: the judge's instructions; left out, the judge's own training
  instructions, else :data:`BUILT_IN` with the source's first system message as context
  (the same three sources as an evaluation's judge);
- ``keep``: which rows are kept (:func:`kept_rows`): ``minScore`` keeps the rows whose
  score is at least that number (scores are in [0, 1]: the judge's 0–10 over 10), and
  ``topShare`` keeps the best share of the rows (``ceil(share × rows)``, ties broken by
  row order); given both, a row must pass both. A row the judge could not score is never
  kept;
- ``dataset``: the output's name, ``NS/NAME`` (a bare ``NAME`` in the project). A request
  without it is refused naming ``dataset``.

When it succeeds, the registry holds two new versions, both with ``metadata.curation``
naming the curation, the pinned source version and the pinned judge version:

- ``dataset`` (``oasst1/curated``): the kept rows, exactly as in the source, in its order;
- ``dataset-judge`` (``oasst1/curated-judge``): every source row, with
  ``extra_info.curation`` = ``{"row", "score", "judgeReply", "kept", "error"}``.

A curation whose judge could not score more than :data:`~akka_optimize.evals.kind.MAX_ERROR_SHARE`
of the rows, or that keeps no row, fails with a sentence (its judge dataset is still
registered, so the scores can be read).
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt
from ..errors import InvalidRequest
from ..jobs import states as S
from ..jobs.kinds import JobKind, Launch, register_kind
from ..jobs.records import end_attempt
from ..jobs.scheduler import wake
from ..jobs.spec import JobSpec
from ..jobs.views import project_fields
from ..store import BlobStore
from .kind import MAX_ERROR_SHARE, _iso, _progress  # the evaluation kind's, shared
from .rows import content_text

METHOD = "curate"
"""The run ``method`` of a curation."""

JUDGE_SUFFIX = "-judge"
"""The judge's dataset is the output's name with this suffix (seeds/001)."""

BUILT_IN = (
    "You review training data for an assistant. You are shown a conversation and the "
    "assistant's final answer in it. Judge whether that answer is correct, helpful and "
    "complete for what was asked, and whether it is worth training on. Reply with the score "
    "only: a whole number from 0 (wrong or useless) to 10 (excellent)."
)
"""The built-in instructions of a curation's judge (the source's first system message is
appended as context, as for an evaluation's judge)."""

PROGRESS_EVERY = 8
"""Rows scored between two progress events."""


@dataclass(frozen=True)
class Keep:
    """A curation's keep rule (module docstring).

    Attributes:
        minScore: keep rows scoring at least this, in [0, 1]; None: no threshold.
        topShare: keep the best share of the rows, in (0, 1]; None: no share.
    """

    minScore: float | None = None  # noqa: N815
    topShare: float | None = None  # noqa: N815

    def to_dict(self) -> dict[str, float | None]:
        """``{"minScore", "topShare"}`` as the record keeps them."""
        return {"minScore": self.minScore, "topShare": self.topShare}


def parse_keep(keep: Any, field: str = "keep") -> Keep:
    """The keep rule of a request.

    Raises:
        InvalidRequest: (``field`` or ``field.minScore``/``field.topShare``) not an object,
            an unknown key, neither rule given, a ``minScore`` outside [0, 1] or a
            ``topShare`` outside (0, 1].
    """
    if not isinstance(keep, dict):
        raise InvalidRequest(
            f'{field}: required, an object such as {{"minScore": 0.7}} or {{"topShare": 0.5}} '
            "(the rows a curation keeps).",
            field=field,
        )
    unknown = sorted(set(keep) - {"minScore", "topShare"})
    if unknown:
        raise InvalidRequest(
            f"{field}.{unknown[0]}: not a keep rule; a keep rule has minScore and/or topShare.",
            field=f"{field}.{unknown[0]}",
        )
    values: dict[str, float | None] = {}
    for key, low_open in (("minScore", False), ("topShare", True)):
        v = keep.get(key)
        if v is None:
            values[key] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidRequest(
                f"{field}.{key}: must be a number, not {v!r}.", field=f"{field}.{key}"
            )
        if v > 1 or v < 0 or (low_open and v == 0):
            span = "above 0 and at most 1" if low_open else "from 0 to 1"
            raise InvalidRequest(
                f"{field}.{key} {v:g}: must be {span} (scores are the judge's 0-10 over 10).",
                field=f"{field}.{key}",
            )
        values[key] = float(v)
    if values["minScore"] is None and values["topShare"] is None:
        raise InvalidRequest(
            f"{field}: give minScore, topShare or both; an empty keep rule keeps nothing.",
            field=field,
        )
    return Keep(**values)


def kept_rows(scores: list[float | None], keep: Keep) -> list[int]:
    """The 0-based rows ``keep`` keeps, in row order.

    Args:
        scores: one score in [0, 1] per row; None for a row the judge did not score.
        keep: the rule (module docstring): ``minScore`` and ``topShare`` both apply when
            both are given; ``topShare`` counts every row, scored or not.
    """
    scored = [i for i, s in enumerate(scores) if s is not None]
    chosen = set(scored)
    if keep.minScore is not None:
        chosen = {i for i in chosen if scores[i] >= keep.minScore - 1e-12}  # type: ignore[operator]
    if keep.topShare is not None:
        n = math.ceil(keep.topShare * len(scores) - 1e-9)
        best = sorted(scored, key=lambda i: (-scores[i], i))[:n]  # type: ignore[operator]
        chosen &= set(best)
    return sorted(chosen)


def curation_instructions(
    given: str | None, judge: Any, rows: list[dict[str, Any]]
) -> tuple[str, str]:
    """The instructions a curation's judge gets and their source (``given``,
    ``judge-training`` or ``built-in``): :func:`akka_optimize.evals.judges.judge_instructions`
    with :data:`BUILT_IN` as the last one."""
    from .judges import judge_instructions

    return judge_instructions(given, judge, rows, built_in=BUILT_IN)


def curation_messages(instructions: str, row: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages that ask a judge to score one row: the conversation before its
    last assistant message, then that answer, asking for a whole number from 0 to 10.

    Args:
        instructions: from :func:`curation_instructions`.
        row: a parsed conversation row that ends with an assistant message.
    """
    from .judges import MAX_SCORE, _conversation

    messages = row.get("messages") or []
    answer = content_text(messages[-1].get("content")) if messages else ""
    user = (
        f"Conversation:\n{_conversation(messages[:-1])}\n\n"
        f"Final assistant answer:\n{answer}\n\n"
        f"Score the answer from 0 to {MAX_SCORE}; reply with the number only."
    )
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]


def check_rows(rows: list[dict[str, Any]], pinned: str) -> None:
    """Refuse (field ``source``) a source without rows, or a row the judge cannot score:
    one that does not end with an assistant answer after a user message (the row named,
    1-based)."""
    if not rows:
        raise InvalidRequest(f"source: dataset {pinned} has no rows to curate.", field="source")
    for i, row in enumerate(rows, start=1):
        messages = row.get("messages") or []
        if not messages or messages[-1].get("role") != "assistant":
            raise InvalidRequest(
                f"source: dataset {pinned} row {i} does not end with an assistant answer; a "
                "curation's judge scores each row's last assistant message.",
                field="source",
            )
        if not any(m.get("role") == "user" for m in messages[:-1]):
            raise InvalidRequest(
                f"source: dataset {pinned} row {i} has no user message before its answer.",
                field="source",
            )


def output_names(dataset: Any, project: str, source: Any) -> tuple[str, str]:
    """``(output, judge output)`` as ``NS/NAME``, from the request's ``dataset``.

    Raises:
        InvalidRequest: (field ``dataset``) left out, not ``NS/NAME`` (a version, alias or
            digest), a name that with ``-judge`` breaks the naming rule, or the source's
            own name.
    """
    from ..refs import MAX_NAME_LENGTH, parse_ref

    if not isinstance(dataset, str) or not dataset.strip():
        raise InvalidRequest(
            "dataset: required; name the dataset the curation registers its kept rows "
            'under, such as "dataset": "oasst1/curated" (the judge\'s dataset goes beside '
            "it as oasst1/curated-judge).",
            field="dataset",
        )
    ref = parse_ref(dataset, project, field="dataset")
    if ref.version is not None or ref.alias or ref.digest:
        raise InvalidRequest(
            f"dataset {dataset!r}: name the output as NS/NAME, without a version, alias or "
            "digest; the curation registers its next version.",
            field="dataset",
        )
    if len(ref.name) + len(JUDGE_SUFFIX) > MAX_NAME_LENGTH:
        raise InvalidRequest(
            f"dataset {dataset!r}: the name is too long for its judge dataset "
            f"{ref.name}{JUDGE_SUFFIX} (at most {MAX_NAME_LENGTH} characters).",
            field="dataset",
        )
    if ref.repo == f"{source.namespace}/{source.name}":
        raise InvalidRequest(
            f"dataset {dataset!r} is the source dataset; a curation registers its kept rows "
            "as a dataset of their own, such as "
            f"{source.namespace}/{source.name}-curated.",
            field="dataset",
        )
    return ref.repo, ref.repo + JUDGE_SUFFIX


def check_curation(
    ctx: Any, s: Session, body: dict[str, Any], project: str, resolve: Any
) -> dict[str, Any]:
    """Resolve and check a curation request: what :func:`start_curation` records and a
    pipeline's curate stage shows (one rule for both; nothing is created).

    Args:
        body: ``source``, ``judge``, ``judgeInstructions``, ``keep``, ``dataset``,
            ``limit`` (curate only the first N rows).
        project: the curation's project (its outputs' default namespace).
        resolve: ``resolve(kind, ref, field=...)`` over what the caller sees.

    Raises:
        InvalidRequest: the field named (``dataset`` left out first, before anything is
            resolved); NotFound: a reference that does not resolve.
    """
    from ..jobs.readable import check_readable
    from ..registry import load_dataset_rows
    from .graders import parse_grader
    from .kind import _check_judge, base_key_of

    if not isinstance(body.get("dataset"), str) or not body["dataset"].strip():
        output_names(body.get("dataset"), project, None)  # raises, naming dataset
    if not isinstance(body.get("source"), str) or not body["source"].strip():
        raise InvalidRequest(
            "source: required; the registry reference of the dataset to curate.", field="source"
        )
    judge_text = body.get("judge")
    if not isinstance(judge_text, str) or not judge_text.startswith("model:"):
        raise InvalidRequest(
            f"judge {judge_text!r}: a curation's judge is model:REFERENCE (a base model or an "
            "adapter that scores each row 0-10).",
            field="judge",
        )
    keep = parse_keep(body.get("keep"))
    spec = parse_grader(judge_text, field="judge")
    judge = resolve("model", spec.ref, field="judge")
    _check_judge(ctx, s, judge, judge_text)
    source = resolve("dataset", body["source"], field="source")
    output, judged = output_names(body["dataset"], project, source)
    check_readable(ctx, "source", source)
    rows = load_dataset_rows(ctx.store, source, field="source")
    limit = body.get("limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequest(f"limit {limit!r}: a whole number from 1.", field="limit")
        rows = rows[:limit]
    check_rows(rows, source.pinned)
    text, where = curation_instructions(body.get("judgeInstructions"), judge, rows)
    return {
        "kind": "curation",
        "project": project,
        "source": source.pinned,
        "sourceRows": len(rows),
        "limit": limit,
        "dataset": output,
        "judgeDataset": judged,
        "keep": keep.to_dict(),
        "grader": {
            "spec": f"model:{judge.repo}:v{judge.version}",
            "judge": judge.pinned,
            "judgeModel": f"{judge.repo}:v{judge.version}",
            "judgeBase": base_key_of(judge),
            "judgeSource": "adapter" if judge.source == "adapter" else "base",
        },
        "judgeInstructions": text,
        "instructionsSource": where,
        "maxErrorShare": MAX_ERROR_SHARE,
    }


def start_curation(
    ctx: Any, s: Session, resolved: dict[str, Any], raw: dict[str, Any], device_kind: str
) -> dict[str, Any]:
    """Record a curation checked by :func:`check_curation`; it waits ``QUEUED`` until the
    scheduler starts it. Returns its view.

    Raises:
        InvalidRequest: ``quota_exceeded`` (no quota or pool could ever admit its claims);
            nothing is created.
    """
    from .kind import _claims

    claims = _claims(ctx, resolved["project"], device_kind, True)
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=resolved["project"],
        method=METHOD,
        state=S.QUEUED,
        plan=raw,
        resolved={**resolved, "claims": claims},
        config_hash=digest,
        base_model=resolved["grader"]["judgeBase"],
        dataset=resolved["source"],
        validation_dataset=None,
        model_name=resolved["dataset"],
        device_kind=device_kind,
        gpus=0,
        total_steps=resolved["sourceRows"],
        results={},
        queue_reason="waiting for the scheduler",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return curation_view(s, run)


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of a curation attempt (the ``curate`` kind's ``build_spec``)."""
    from ..registry import resolve

    s, r = launch.session, launch.run.resolved
    grader = {**r["grader"], "kind": "model", "instructions": r["judgeInstructions"]}
    return launch.spec(
        dataset=resolve(s, "dataset", r["source"]).to_dict(),
        extra={"curation": {"grader": grader, "keep": r["keep"], "limit": r.get("limit")}},
    )


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
    from .judges import judge_request, parse_score
    from .sandbox import GradeResult
    from .worker import ask_judge

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
    from ..registry import load_dataset_rows
    from ..registry.datasets import canonical_line
    from ..testhooks import hold
    from .worker import _open_judge, _version, summary

    cu = spec.extra["curation"]
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the source dataset"})
    source = _version("dataset", spec.dataset)
    rows = load_dataset_rows(store, source)
    if cu.get("limit"):
        rows = rows[: int(cu["limit"])]
    n = len(rows)
    grader = cu["grader"]
    hold("curating")  # tests only: stop before the judge is asked
    events.send({"type": "progress", "completed": 0, "total": n, "stage": "judging"})
    _open_judge(events, grader, n)

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


def _register(ctx: Any, s: Session, run: Run, key: str, name: str) -> Any:
    """Register the JSONL at blob ``key`` as the next version of ``name``, with
    ``metadata.curation`` (the curation, the pinned source and judge)."""
    from ..deployment import load_deployment
    from ..registry import register_dataset

    r = run.resolved
    limits = load_deployment(ctx.settings.resolved_deployment_file()).limits
    lineage = {"curation": run.id, "source": r["source"], "judge": r["grader"]["judge"]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "examples.jsonl"
        path.write_bytes(ctx.store.get_bytes(key))
        rv, _created = register_dataset(
            s, ctx.store, name, path, limits=limits, project=run.project,
            source=f"curation {run.id[:8]}", lineage=lineage, origin="curation",
        )  # fmt: skip
    return rv


def _completed(ctx: Any, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]) -> None:
    """Register the judge's dataset, then (unless too many rows failed or none was kept)
    the kept rows; end the attempt."""
    res = dict(event.get("result") or {})
    r = run.resolved
    judged = _register(ctx, s, run, res["judgeKey"], r["judgeDataset"])
    outputs: dict[str, Any] = {"judgeDataset": judged.pinned, "dataset": None}
    run.current_step = run.total_steps or run.current_step or 0
    share = r.get("maxErrorShare", 0.5)
    if res["count"] and res["errors"] / res["count"] > share:
        reason = (
            f"The judge could not score {res['errors']} of {res['count']} rows (more than "
            f"{share:.0%}); {judged.pinned} holds each row's error."
        )
    elif not res["kept"]:
        best = res.get("mean")
        reason = (
            f"No row met the keep rule {json.dumps(r['keep'])} (mean score "
            f"{best if best is None else round(best, 4)}); {judged.pinned} holds every row's "
            "score."
        )
    else:
        kept = _register(ctx, s, run, res["keptKey"], r["dataset"])
        outputs["dataset"] = kept.pinned
        reason = None
    run.results = {**(run.results or {}), **res, **outputs, "stage": "registered"}
    end_attempt(run, att, S.FAILED if reason else S.SUCCEEDED, reason)


CURATION = register_kind(
    JobKind(
        name=METHOD,
        worker="akka_optimize.evals.curation:curate",
        build_spec=build_spec,
        events={"progress": _progress, "completed": _completed},
    )
)
"""The curation kind, registered when this module is imported."""


def curation_view(s: Session, run: Run) -> dict[str, Any]:
    """The API record of a curation (``GET /v1/training/curations/ID``)."""
    r = run.resolved or {}
    res = run.results or {}
    g = r.get("grader") or {}
    return {
        "id": run.id,
        **project_fields(s, run.project),
        "state": run.state,
        "phase": run.phase_detail,
        "queueReason": run.queue_reason if run.state == S.QUEUED else None,
        "source": r.get("source"),
        "dataset": r.get("dataset"),
        "judgeDataset": r.get("judgeDataset"),
        "judge": g.get("judge"),
        "judgeModel": g.get("judgeModel"),
        "judgeInstructions": r.get("judgeInstructions"),
        "instructionsSource": r.get("instructionsSource"),
        "judgeEndpoint": res.get("judgeEndpoint"),
        "keep": r.get("keep"),
        "limit": r.get("limit"),
        "claims": r.get("claims"),
        "progress": {"completed": run.current_step or 0, "total": run.total_steps or 0},
        "results": {k: res.get(k) for k in ("count", "scored", "errors", "kept", "mean", "stderr")}
        if "count" in res
        else None,
        "outputs": {"dataset": res.get("dataset"), "judgeDataset": res.get("judgeDataset")}
        if "judgeDataset" in res
        else None,
        "failureReason": run.failure_reason,
        "createdAt": _iso(run.created_at),
        "startedAt": _iso(run.started_at),
        "finishedAt": _iso(run.finished_at),
    }
