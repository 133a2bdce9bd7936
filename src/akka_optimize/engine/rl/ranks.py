"""Reinforcement runs on several ranks (``execution.gpus`` N > 1; issue 52 item 1).

Each update's prompts are dealt to the ranks as whole groups: group ``i`` (the update's
i-th prompt with all its ``samplesPerPrompt`` completions) goes to rank ``i mod N``
(:func:`rank_groups`; seeds/004 §1.3 G, DATA-AND-TRAINING-RULES.md rules 17–18), so a
rank's stream is whole groups, no prompt is on two ranks and no group is expanded twice.
Each rank samples its groups with its own replica of the adapter (``execution.memory.
sharding: none``: sampling runs a different number of decode steps on each rank, which a
sharded body's collectives could not follow), scores them, and computes their advantages
per group; each group draws from its own generator (``RLSettings.group_generators``), so
it gets the same samples on whichever rank. The loss aggregation's token and sequence
counts and every metric are the whole update's (:class:`RankReduce`); the gradients are
summed once per update in ``optim_step``; rank 0 writes the one adapter.
"""

from __future__ import annotations

import torch

from .. import distributed as D
from ..errors import EngineError
from .gap import Reduce


def rank_groups(groups: int, rank: int, world: int) -> list[int]:
    """The indices of the update's groups that ``rank`` of ``world`` samples and trains:
    ``i`` with ``i mod world == rank`` (the extra groups go to the lowest ranks).

    Raises:
        ValueError: ``world`` < 1 or ``rank`` outside ``[0, world)``.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} of a world of {world} does not exist")
    return list(range(rank, groups, world))


class RankReduce(Reduce):
    """Sums and maxima over the joined process group (float64, one all-reduce each)."""

    def sums(self, values: list[float]) -> list[float]:
        """``values`` summed over every rank."""
        return D.all_sum([float(v) for v in values])

    def maxes(self, values: list[float]) -> list[float]:
        """The elementwise largest of ``values`` over every rank."""
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=D.comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(x) for x in t.cpu()]


def check_rank_session(session: object, max_staleness: int) -> None:
    """Refuse what a reinforcement run on several ranks cannot do.

    Raises:
        EngineError: a sharded body (``execution.memory.sharding`` other than ``none``),
            or ``maxStaleness`` above 0.
    """
    if getattr(session, "sharded", False):
        raise EngineError(
            "a reinforcement run on several devices keeps a whole replica of the adapter "
            "on each rank (each samples its own groups); set execution.memory.sharding "
            "to none.",
            field="execution.memory.sharding",
            code="not_available",
        )
    if max_staleness > 0:
        raise EngineError(
            "rlHyperparams.maxStaleness above 0 runs on one device; use 0 with "
            "execution.gpus above 1.",
            field="config.rlHyperparams.maxStaleness",
            code="not_available",
        )
