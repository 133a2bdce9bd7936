"""A curation request, checked: its keep rule, its output names, its judge and its rows.

:func:`check_curation` resolves and checks a request (what
:func:`akka_optimize.evals.curation.kind.start_curation` records and a pipeline's curate stage
shows); :class:`Keep` with :func:`parse_keep` and :func:`kept_rows` is the keep rule (the
module docstring of :mod:`akka_optimize.evals.curation.kind`); :func:`curation_instructions`
settles the judge's instructions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ...errors import InvalidRequest
from ...jobs.context import JobContext
from ...jobs.readable import check_readable
from ...refs import MAX_NAME_LENGTH, parse_ref
from ...registry import load_dataset_rows
from ..graders.judges import judge_instructions
from ..graders.spec import parse_grader
from ..request import MAX_ERROR_SHARE
from ..scoring import base_key_of, check_judge

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
    ``judge-training`` or ``built-in``): :func:`akka_optimize.evals.graders.judges.judge_instructions`
    with :data:`BUILT_IN` as the last one."""

    return judge_instructions(given, judge, rows, built_in=BUILT_IN)


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
    ctx: JobContext, s: Session, body: dict[str, Any], project: str, resolve: Any
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
    check_judge(ctx, s, judge, judge_text)
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
