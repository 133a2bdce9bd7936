"""The adapter weights of a training client's sampler snapshots, kept so that a sampling
client of an earlier step still samples (and scores) that step's weights.

``save_weights_and_get_sampling_client`` names the step it was taken at; Tinker's sampling
client keeps sampling those weights after the training client moves on. tinker-cookbook
relies on it: DPO's reference model is the step-0 snapshot, scored at every update
(``preference/train_dpo.py``), and its asynchronous RL samples with a snapshot a few
updates old. The worker keeps a copy of the trainable (LoRA) tensors of the
:data:`KEEP` snapshots used last and swaps one in for a call on its step; a snapshot no
longer kept is refused with a sentence (:func:`akka_optimize.tinker.sampling.sample`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

KEEP = 4
"""Snapshots whose adapter weights a worker keeps (the least recently used is dropped
first): the LoRA tensors only, a few MB each for the catalog's ranks."""


class Snapshots:
    """The adapter tensors of a session at the steps its sampler snapshots were taken."""

    def __init__(self, session: Any, keep: int = KEEP):
        self.session, self.keep = session, keep
        self.kept: OrderedDict[int, dict[str, Any]] = OrderedDict()

    def _trainable(self) -> dict[str, Any]:
        return {n: p for n, p in self.session.model.named_parameters() if p.requires_grad}

    def take(self) -> int:
        """Keep the session's current adapter tensors under its step; returns the step."""
        step = int(self.session.step)
        if step not in self.kept:
            self.kept[step] = {n: p.detach().clone() for n, p in self._trainable().items()}
        self.kept.move_to_end(step)
        while len(self.kept) > self.keep:
            self.kept.popitem(last=False)
        return step

    def call_at(self, step: Any, call: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """``call()`` with the adapter tensors of ``step`` in place, then the session's own
        back (bit for bit, its optimizer untouched); None when ``step`` is the current one
        or not kept (the caller answers with the current weights or refuses)."""
        import torch

        if step == self.session.step or step not in self.kept:
            return None
        self.kept.move_to_end(step)
        params = self._trainable()
        own = {n: p.detach().clone() for n, p in params.items()}
        try:
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(self.kept[step][n])
            return call()
        finally:
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(own[n])
