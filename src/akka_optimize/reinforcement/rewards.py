"""A reinforcement run's reward: the graders of evaluations, scoring sampled completions
(issue 18 item 2; seeds/000 "Training parameters" ``rlHyperparams.reward``).

``rlHyperparams.reward`` is one of:

- ``bundle:REFERENCE#MODULE[:FUNCTION]``: a scoring bundle's function, called as an
  evaluation calls it (veRL's ``compute_score(data_source, solution_str, ground_truth,
  extra_info)``, :mod:`.rows`), in the same sandboxed worker pool (:mod:`.sandbox`);
- ``model:REFERENCE``: a judge on its own endpoint, asked as an evaluation's judge is
  (:mod:`.judges`; the score is its reply over 10);
- ``builtin:math`` (:func:`math_reward`): 1 when the completion's final answer equals the
  row's gold answer, else 0.

A reward that fails for a sample (the grader raised, hung, passed a limit or returned no
number; the judge's reply held no score) scores 0 for that sample and is counted
(``rewardErrors`` per update). When more than :data:`MAX_ERROR_SHARE` of all the run's
samples so far have failed, the run fails with one sentence naming the last reason.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import AkkaError
from ..evals.worker import judge_all

BUILTIN_MATH = "builtin:math"
"""The built-in reward: the final answer against the gold answer."""

MAX_ERROR_SHARE = 0.5
"""The share of failed rewards (over every sample of the run so far) past which the run
fails."""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` (braces balanced), or None."""
    at = text.rfind("\\boxed{")
    if at < 0:
        return None
    depth, start = 0, at + len("\\boxed{")
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[start:i]
            depth -= 1
    return None


def final_answer(text: str) -> str | None:
    """A text's final answer: the last ``\\boxed{…}``, else what follows the last
    ``####`` (GSM8K's marker) up to the end of its line; None when it has neither."""
    boxed = _boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        after = text.rsplit("####", 1)[1].strip()
        return after.splitlines()[0].strip() if after else ""
    return None


def _normal(answer: str) -> str:
    s = answer.strip().strip("$").strip().rstrip(".").replace(",", "").replace(" ", "")
    m = _NUMBER.fullmatch(s)
    if m:
        v = float(s)
        return str(int(v)) if v == int(v) else repr(v)
    return s.lower()


def math_reward(completion: str, ground_truth: Any) -> float:
    """``builtin:math``: 1.0 when the completion's final answer (:func:`final_answer`)
    equals the gold answer, else 0.0.

    The gold answer is the final answer of the row's ground truth (its reference answer,
    whose GSM8K form ends ``#### 42``), or the whole ground truth when it has no marker.
    Both are compared after dropping ``$``, thousands separators, spaces and a final
    period; numbers compare by value (``42.0`` equals ``42``), other answers case-blind.
    A completion with no ``\\boxed{}`` and no ``####`` scores 0.
    """
    got = final_answer(completion)
    if got is None or not got:
        return 0.0
    truth = str(ground_truth)
    gold = final_answer(truth)
    gold = gold if gold else truth
    return float(_normal(got) == _normal(gold))


class RewardFailed(AkkaError):
    """More than :data:`MAX_ERROR_SHARE` of a run's rewards failed."""

    code = "reward_failed"


class Rewards:
    """Scores a reinforcement run's samples with its reward (see the module docstring).

    Args:
        grader: the pinned reward: ``{"kind": "builtin"}``, a bundle's ``{"kind":
            "bundle", "module", "function"}`` with ``bundle_dir`` given, or a judge's
            ``{"kind": "model", "judgeModel", "instructions"}``.
        decode: token ids → text (the tokenizer's ``decode`` without special tokens).
        events: the worker's event client (a judge is reached through it).
        bundle_dir / limits / hidden: a bundle grader's folder, sandbox limits and the
            folders it must not see.

    Use it as a context manager: a bundle's worker pool lives for the whole run.
    """

    def __init__(
        self,
        grader: dict[str, Any],
        decode: Any,
        events: Any = None,
        *,
        bundle_dir: Any = None,
        limits: Any = None,
        hidden: list[Any] | None = None,
        concurrency: int = 16,
    ) -> None:
        self.grader, self.decode, self.events = grader, decode, events
        self.bundle_dir, self.limits, self.hidden = bundle_dir, limits, hidden or []
        self.concurrency = concurrency
        self.pool: Any = None
        self.samples = 0
        self.errors = 0
        self.last_error: str | None = None

    def __enter__(self) -> Rewards:
        if self.grader["kind"] == "bundle":
            from ..evals.sandbox.pool import GraderPool  # lazy: guarded

            self.pool = GraderPool(
                self.bundle_dir,
                self.grader["module"],
                self.grader["function"],
                self.limits,
                hidden=self.hidden,
            ).__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.__exit__(*exc)
            self.pool = None

    def _grades(
        self, prompts: list[Any], samples: list[Any]
    ) -> list[tuple[float | None, str | None]]:
        texts = [self.decode(s.tokens) for s in samples]
        kind = self.grader["kind"]
        if kind == "builtin":
            return [
                (math_reward(t, prompts[s.group].ground_truth), None)
                for s, t in zip(samples, texts, strict=True)
            ]
        rows = [prompts[s.group].source for s in samples]
        if kind == "bundle":
            calls = [
                {
                    "data_source": r.data_source,
                    "solution_str": t,
                    "ground_truth": r.ground_truth,
                    "extra_info": r.extra_info,
                }
                for r, t in zip(rows, texts, strict=True)
            ]
            return [(g.score, g.error) for g in self.pool.score(calls)]

        graded = judge_all(
            self.events,
            self.grader,
            rows,
            texts,
            concurrency=self.concurrency,
            stop=lambda: False,
            announce=self.samples == 0,
        )
        return [(g.score, g.error) for g in graded]

    def __call__(self, prompts: list[Any], samples: list[Any]) -> None:
        """Fill each sample's ``reward`` (0 with ``error`` when its reward failed).

        Raises:
            RewardFailed: failed rewards passed :data:`MAX_ERROR_SHARE` of the run's samples.
        """
        for s, (score, error) in zip(samples, self._grades(prompts, samples), strict=True):
            s.reward = float(score) if score is not None and error is None else 0.0
            s.error = error if score is None or error is not None else None
            if s.error is not None:
                self.errors += 1
                self.last_error = s.error
        self.samples += len(samples)
        if self.errors > MAX_ERROR_SHARE * self.samples:
            raise RewardFailed(
                f"{self.errors} of the run's {self.samples} rewards failed (more than "
                f"{MAX_ERROR_SHARE:.0%}); the last one: {self.last_error}"
            )
