"""The supervised smoke check (seeds/000 "Smaller changes"; F076).

A smoke run (``smoke: true``) trains a small slice of its dataset, the first
``smokeCheck.rows`` conversations in file order, until the model reproduces it, and
reports that reading. It answers "does this plan train at all?" in minutes: a plan whose
masks, learning rate or chat template are wrong cannot make a LoRA adapter reproduce a
handful of conversations.

**Reproduction** is measured over the whole slice, never over one micro batch: greedy
token accuracy under teacher forcing, the share of the slice's supervised tokens that
are the adapted model's most likely next token (what greedy decoding would write at that
place). Each conversation is one forward of the model as it serves (its own
``forward``, in the session's compute dtype), so the measure holds ``T × vocabulary``
logits of one conversation at a time. It is measured every
``smokeCheck.measureEverySteps`` updates and at the last one.

The check **stops only when the reading reaches ``smokeCheck.threshold``**: the run then
ends with ``reading: REPRODUCED``. A run that stops earlier, by reaching
``smokeCheck.maxSteps`` or otherwise, measures the slice where it stopped; below the
threshold it reports ``reading: UNSTABLE_READING`` (the model did not reproduce the
slice, so the check cannot say the plan trains).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..data.types import Example
from .config import EngineConfig

REPRODUCED = "REPRODUCED"
UNSTABLE_READING = "UNSTABLE_READING"


@dataclass(frozen=True)
class SmokeCheck:
    """``smokeCheck`` of a smoke run's plan (defaults: :data:`akka_optimize.plan.defaults.
    SMOKE_CHECK`).

    Attributes:
        rows: conversations in the slice (the dataset's first ``rows``, in file order).
        threshold: the reproduction share (0–1] that ends the check.
        max_steps: updates at most before the check stops early.
        measure_every_steps: updates between two measurements.
    """

    rows: int = 8
    threshold: float = 0.9
    max_steps: int = 100
    measure_every_steps: int = 5

    @classmethod
    def from_plan(cls, raw: dict[str, Any]) -> SmokeCheck:
        """From the resolved plan's ``smokeCheck`` (camelCase keys)."""
        return cls(
            rows=int(raw["rows"]),
            threshold=float(raw["threshold"]),
            max_steps=int(raw["maxSteps"]),
            measure_every_steps=int(raw["measureEverySteps"]),
        )


def smoke_slice(train: list[Example], check: SmokeCheck) -> list[Example]:
    """The slice a smoke run trains: the first ``check.rows`` examples (all when fewer)."""
    return train[: check.rows]


def smoke_config(cfg: EngineConfig, slice_rows: int, check: SmokeCheck) -> EngineConfig:
    """``cfg`` bounded by the check: ``max_steps`` updates, enough epochs of the slice to
    reach them (the slice is trained over and over until it is reproduced)."""
    from dataclasses import replace

    per_epoch = cfg.updates_per_epoch(slice_rows)
    return replace(cfg, max_steps=check.max_steps, epochs=math.ceil(check.max_steps / per_epoch))


def reproduction(session: Any, rows: list[Example]) -> tuple[float, int]:
    """Greedy token accuracy of the session's model over ``rows`` (the module docstring).

    Args:
        session: a :class:`akka_optimize.engine.session.training.TrainingSession`.
        rows: the slice; ``weights[t]`` non-zero marks token ``t`` as supervised.

    Returns:
        ``(share, supervised tokens)``: the share (0–1) of supervised tokens ``t`` with
        ``argmax logits[t-1] == input_ids[t]``.
    """
    import torch

    hits = total = 0
    model = session.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), session.compute_context():
            for ex in rows:
                ids = torch.tensor([ex.input_ids], device=session.device)
                logits = model(input_ids=ids, use_cache=False).logits[0, :-1]
                pred = logits.argmax(-1).cpu()
                scored = torch.tensor(ex.weights[1:]) != 0
                target = ids[0, 1:].cpu()
                hits += int((pred[scored] == target[scored]).sum())
                total += int(scored.sum())
    finally:
        model.train(was_training)
    return (hits / total if total else 0.0), total


class SmokeMeter:
    """Measures a smoke run's slice and decides when the check ends.

    Call it after each update (``run_sft(until=…)``): it measures every
    ``measure_every_steps`` updates and at ``last_step``, emits a ``smoke`` event per
    measurement (``step``, ``reproduction``, ``supervisedTokens``, ``threshold``) and
    returns True once the reading reaches the threshold.
    """

    def __init__(self, rows: list[Example], check: SmokeCheck, emit: Any):
        self.rows = rows
        self.check = check
        self.emit = emit
        self.last: dict[str, Any] | None = None

    def measure(self, session: Any, step: int) -> dict[str, Any]:
        """Measure now; returns (and keeps) the measurement."""
        share, tokens = reproduction(session, self.rows)
        self.last = {
            "type": "smoke",
            "step": step,
            "reproduction": share,
            "supervisedTokens": tokens,
            "threshold": self.check.threshold,
        }
        self.emit(self.last)
        return self.last

    def __call__(self, session: Any, step: int, last_step: int) -> bool:
        if step % self.check.measure_every_steps and step != last_step:
            return False
        return self.measure(session, step)["reproduction"] >= self.check.threshold

    def reading(self) -> dict[str, Any]:
        """The check's report: ``reading`` (REPRODUCED or UNSTABLE_READING), the last
        measurement's ``reproduction`` and ``step``, ``threshold``, ``rows`` and the
        slice's ``supervisedTokens``."""
        last = self.last or {"reproduction": 0.0, "step": 0, "supervisedTokens": 0}
        ok = last["reproduction"] >= self.check.threshold
        return {
            "reading": REPRODUCED if ok else UNSTABLE_READING,
            "reproduction": last["reproduction"],
            "step": last["step"],
            "threshold": self.check.threshold,
            "rows": len(self.rows),
            "supervisedTokens": last["supervisedTokens"],
            "maxSteps": self.check.max_steps,
        }
