"""The packing plan: serialized rows → packed rows → microbatches → optimizer updates.

seeds/003 "Packed SFT settings": each packed row holds up to ``sequence_length`` tokens
(whole conversations, best-fit decreasing with :func:`akka_optimize.data.packing.pack`;
a row runs at its own length, so padding is never computed or counted);
``rows_per_microbatch`` packed rows make a microbatch and ``gradient_accumulation_steps``
microbatches make an update. ``seed`` shuffles the packed rows once per epoch
(``random.Random(f"{seed}:{epoch}")``), so two runs with one seed see one order.

A microbatch holds at most ``projection_chunk_size × max_projection_chunks`` supervised
target positions; the plan is checked before any training and an overflowing microbatch
is refused, naming its dataset rows. ``generation.json`` (:func:`plan_record`) records the
plan; the step events' token counts sum to its totals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from akka_optimize.data.packing import pack

from .recipe import PackedTraining
from .registry import RecipeError
from .rows import ARGUMENTS, ROUTING, ActionExample


@dataclass(frozen=True)
class PackedRow:
    """Whole serialized rows packed into one sequence.

    Attributes:
        index: position in :attr:`Plan.rows`.
        input_ids: the concatenated tokens (≤ ``sequence_length``).
        stage: stage label per token (first token of each conversation 0).
        position_ids: restarting at 0 for each conversation.
        cu_seqlens: conversation boundaries ``[0, L1, …, T]``.
        dataset_rows: the data file line of each packed conversation.
    """

    index: int
    input_ids: list[int]
    stage: list[int]
    position_ids: list[int]
    cu_seqlens: list[int]
    dataset_rows: list[int]

    @property
    def supervised(self) -> int:
        """Supervised target positions (routing + argument tokens)."""
        return sum(1 for s in self.stage if s)


@dataclass(frozen=True)
class Plan:
    """Packed rows and, per optimizer update, its microbatches (lists of row indexes)."""

    rows: list[PackedRow]
    updates: list[list[list[int]]]
    epoch_updates: int

    def microbatch_tokens(self, mb: list[int]) -> tuple[int, int]:
        """(input tokens, supervised target positions) of one microbatch."""
        return (
            sum(len(self.rows[i].input_ids) for i in mb),
            sum(self.rows[i].supervised for i in mb),
        )


def pack_rows(examples: list[ActionExample], sequence_length: int) -> list[PackedRow]:
    """Pack serialized rows into rows of at most ``sequence_length`` tokens."""
    by_row = {e.row: e for e in examples}
    out = []
    for i, p in enumerate(pack([e.example() for e in examples], sequence_length)):
        stage: list[int] = []
        for r in p.rows:
            s = list(by_row[r].stage)
            s[0] = 0
            stage.extend(s)
        out.append(PackedRow(i, p.input_ids, stage, p.position_ids, p.cu_seqlens, p.rows))
    return out


def _epoch(n_rows: int, t: PackedTraining, epoch: int) -> list[list[list[int]]]:
    order = list(range(n_rows))
    random.Random(f"{t.seed}:{epoch}").shuffle(order)
    r, g = t.rows_per_microbatch, t.gradient_accumulation_steps
    mbs = [order[i : i + r] for i in range(0, len(order), r)]
    return [mbs[i : i + g] for i in range(0, len(mbs), g)]


def build_plan(
    examples: list[ActionExample], t: PackedTraining, updates: int | None, cap: int | None
) -> Plan:
    """Plan the run's updates and check every microbatch against the target capacity.

    Args:
        updates: exactly this many updates, cycling epochs (two-stage ``training.updates``);
            ``None`` plans one epoch.
        cap: ``limits.max_steps``: at most this many updates.

    Raises:
        RecipeError: a microbatch with more supervised target positions than
            ``projection_chunk_size × max_projection_chunks`` (names update, microbatch and
            dataset rows).
    """
    rows = pack_rows(examples, t.sequence_length)
    first = _epoch(len(rows), t, 0)
    planned = list(first)
    epoch = 1
    while updates is not None and len(planned) < updates:
        planned += _epoch(len(rows), t, epoch)
        epoch += 1
    n = updates if updates is not None else len(planned)
    if cap is not None:
        n = min(n, cap)
    plan = Plan(rows, planned[:n], len(first))
    check_capacity(plan, t)
    return plan


def check_capacity(plan: Plan, t: PackedTraining) -> None:
    """Refuse the first microbatch whose supervised targets exceed the capacity."""
    capacity = t.target_capacity
    for step, mbs in enumerate(plan.updates, start=1):
        for k, mb in enumerate(mbs, start=1):
            _, supervised = plan.microbatch_tokens(mb)
            if supervised <= capacity:
                continue
            ds = [r for i in mb for r in plan.rows[i].dataset_rows]
            raise RecipeError(
                f"Microbatch {k} of update {step} holds dataset rows "
                f"{', '.join(f'row {r}' for r in ds)} with {supervised} supervised target "
                f"positions, more than training.projection_chunk_size × "
                f"training.max_projection_chunks = {t.projection_chunk_size} × "
                f"{t.max_projection_chunks} = {capacity}; raise max_projection_chunks or "
                "lower rows_per_microbatch / sequence_length.",
                field="training.max_projection_chunks",
                details={"update": step, "microbatch": k, "rows": ds},
            )


def plan_record(plan: Plan, t: PackedTraining, header: dict[str, Any]) -> dict[str, Any]:
    """The JSON of ``generation.json``: ``header`` plus the layout, rows and updates."""
    updates = []
    for step, mbs in enumerate(plan.updates, start=1):
        mb_out = []
        for mb in mbs:
            tokens, supervised = plan.microbatch_tokens(mb)
            mb_out.append(
                {"packed_rows": mb, "input_tokens": tokens, "supervised_tokens": supervised}
            )
        updates.append(
            {
                "step": step,
                "microbatches": mb_out,
                "input_tokens": sum(m["input_tokens"] for m in mb_out),
                "supervised_tokens": sum(m["supervised_tokens"] for m in mb_out),
            }
        )
    return header | {
        "layout": {
            "sequence_length": t.sequence_length,
            "rows_per_microbatch": t.rows_per_microbatch,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "target_capacity": t.target_capacity,
            "seed": t.seed,
        },
        "packed_rows": [
            {
                "index": r.index,
                "dataset_rows": r.dataset_rows,
                "input_tokens": len(r.input_ids),
                "supervised_tokens": r.supervised,
                "routing_tokens": sum(1 for s in r.stage if s == ROUTING),
                "argument_tokens": sum(1 for s in r.stage if s == ARGUMENTS),
            }
            for r in plan.rows
        ],
        "updates": updates,
        "totals": {
            "updates": len(updates),
            "epoch_updates": plan.epoch_updates,
            "input_tokens": sum(u["input_tokens"] for u in updates),
            "supervised_tokens": sum(u["supervised_tokens"] for u in updates),
        },
    }
