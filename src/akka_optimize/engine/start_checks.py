"""The checks a supervised run on several devices makes before its first update (F096,
F097; seeds/001 "A supervised run checks itself before it trains").

Each check scores the conversations of the run's first update (every rank scores all of
them, so the ranks' collectives match and every rank reaches the same verdict) and
compares one value with its bound (``checks.*`` engine settings):

- ``head``: the chunked output head's log-probabilities against the whole head's
  (``checks.head.max_logprob_error``);
- ``isolation``: each conversation's log-probabilities packed with the others against
  alone (``checks.isolation.max_logprob_error``);
- ``packing``: the mean loss packed against one conversation per pass
  (``checks.packing.max_mean_loss_difference``; unset, the bound is
  :func:`packing_bound`, which scales with the positions compared);
- ``reference``: the engine's log-probabilities against the model's own forward in plain
  Transformers (:func:`akka_optimize.engine.reference.reference_check`), only on an
  attempt from a fresh adapter (``checks.reference.max_logprob_error``).

A value past its bound fails the run before it trains (:class:`StartCheckFailed`, whose
sentence names the check, the value and the bound).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from ..data.types import Example, Pass, pack_examples
from .config import CHECK_SETTINGS
from .errors import EngineError
from .reference import reference_check
from .session.training import TrainingSession


class StartCheckFailed(EngineError):
    """A check before the first update is past its bound; the run fails before it trains.

    Attributes:
        checks: every check that ran, ``[{"name", "value", "bound", "passed", "positions",
            "setting"}]`` in the order run (``runs get --checks`` shows them).
    """

    checks: list[dict[str, Any]] = []


def packing_bound(positions: int, dtype: torch.dtype) -> float:
    """The default bound of the ``packing`` check: ``4·ε/√n`` for ``n`` positions compared,
    ε = 1e-2 with bf16 computation and 1e-5 with fp32 (the rounding of one log-probability),
    so a few positions, whose mean rounds less evenly, get a wider bound."""
    eps = 1e-2 if dtype == torch.bfloat16 else 1e-5
    return 4 * eps / math.sqrt(max(positions, 1))


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((float((x - y).abs().max()) for x, y in zip(a, b, strict=True)), default=0.0)


def _together(rows: list[Example]) -> list[Pass]:
    """``rows`` as one pass, but for image rows: each a pass of its own (never packed)."""
    text = [ex for ex in rows if not ex.vision]
    alone = [pack_examples([ex]) for ex in rows if ex.vision]
    return ([pack_examples(text)] if text else []) + alone


def _head(session: TrainingSession, rows: list[Example]) -> tuple[float, int]:
    passes = _together(rows)
    chunked = session.forward(passes)
    cfg = session.cfg
    session.cfg = replace(cfg, head_chunk_tokens=1 << 30)  # the whole head at once
    try:
        whole = session.forward(passes)
    finally:
        session.cfg = cfg
    return _max_diff(chunked.logprobs, whole.logprobs), chunked.supervised_tokens


def _isolation(
    session: TrainingSession, rows: list[Example], perturb: bool
) -> tuple[float, int, float]:
    """(largest log-prob difference packed vs alone, positions, mean-loss difference) over
    the text rows: image rows are never packed, so nothing of theirs can leak."""
    rows = [ex for ex in rows if not ex.vision]
    if not rows:
        return 0.0, 0, 0.0
    packed = pack_examples(rows)
    if perturb:  # tests only: positions run on across conversations, so they mix
        packed = replace(packed, position_ids=list(range(packed.num_tokens)))
        packed = replace(packed, cu_seqlens=[0, packed.num_tokens])
    together = session.forward([packed])
    alone = session.forward([pack_examples([ex]) for ex in rows])
    joined = torch.cat(alone.logprobs)
    worst = float((together.logprobs[0] - joined).abs().max())
    mean_diff = abs(
        together.loss_sum / together.supervised_tokens - alone.loss_sum / alone.supervised_tokens
    )
    return worst, together.supervised_tokens, mean_diff


def start_checks(
    session: TrainingSession, rows: list[Example], bounds: dict[str, float | None], fresh: bool
) -> list[dict[str, Any]]:
    """Run the checks on ``rows`` (the first update's conversations) against ``bounds``
    (check name → bound; ``packing`` None scales, :func:`packing_bound`).

    Args:
        fresh: the attempt starts from a fresh adapter (the reference check runs).

    Returns:
        ``[{"name", "value", "bound", "passed", "positions", "setting"}]`` in the order run.

    Raises:
        StartCheckFailed: the first check past its bound, naming check, value and bound.
    """
    perturb = bool(session.cfg.extra.get("perturb_isolation"))
    head, positions = _head(session, rows)
    isolation, _, packing = _isolation(session, rows, perturb)
    values = {"head": head, "isolation": isolation, "packing": packing}
    if fresh:
        values["reference"] = reference_check(
            session, _together(rows), rows, tolerance=bounds["reference"] or 0.0
        ).max_error
    out = []
    for name, value in values.items():
        bound = bounds.get(name)
        if name == "packing" and bound is None:
            bound = packing_bound(positions, session.dtype)
        out.append(
            {
                "name": name,
                "value": value,
                "bound": bound,
                "passed": value <= bound,
                "positions": positions,
                "setting": f"config.engineSettings.{CHECK_SETTINGS[name]}",
            }
        )
    for check in out:
        if not check["passed"]:
            failed = StartCheckFailed(
                f"The {check['name']} check before the first update measured "
                f"{check['value']:.3g}, past its bound {check['bound']:.3g} "
                f"({check['setting']}, over {positions} positions); the run did not train. "
                "Raise the bound or set config.engineSettings.checks.start to false.",
                code="start_check_failed",
                field=check["setting"],
            )
            failed.checks = out
            raise failed
    return out
