"""The ranks of a :class:`~akka_optimize.engine.session.training.TrainingSession` on several devices.

Every rank trains its share of each update (:func:`akka_optimize.engine.distributed.rank_share`);
with FSDP2 every rank runs as many passes as the rank with the most (a rank short of passes
runs an idle pass whose loss is 0, so the collectives match), and gradients are reduced once,
after the last pass, unless ``engine.use_no_sync_for_gradient_accumulation`` is false. The
update's summed loss, supervised and total tokens are summed over the ranks before
``optim_step`` divides, so the loss and gradients are the token-weighted mean over the whole
update (DATA-AND-TRAINING-RULES.md §2; seeds/001 "Other changes"). Saves gather the full
adapter and optimizer state, written by rank 0 in the one-device format.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import Tensor

from ...data.types import Pass
from .. import distributed as D
from ..attention import SEGMENTS_KWARG
from ..config import EngineConfig
from ..errors import EngineError


class RanksMixin:
    """Rank handling of :class:`~akka_optimize.engine.session.training.TrainingSession` (which sets
    the attributes annotated here and provides ``forward_backward``)."""

    cfg: EngineConfig
    device: torch.device
    model: Any
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    _body: Any
    _packed_attention: bool
    _pending: Any
    step: int
    rank: int = 0
    world: int = 1
    sharded: bool = False

    def _join_ranks(self) -> None:
        """Join the run's process group (``cfg.ranks`` > 1) and shard the body; called
        before the optimizer is built, so it holds the shards."""
        c = self.cfg
        D.init_ranks(c.ranks, self.device.type)
        self.rank, self.world = D.world()
        self.sharded = self.world > 1 and c.sharding == "full"
        if c.buffer_dtype:  # dtypes.buffer: the floating buffers (rotary tables)
            for module in self.model.modules():
                for name, buf in list(module._buffers.items()):
                    if buf is not None and buf.is_floating_point():
                        module._buffers[name] = buf.to(D.torch_dtype(c.buffer_dtype))
        if self.world > 1:
            reduce = D.torch_dtype(c.reduce_dtype)
            D.shard_model(self._body, c.sharding, reduce, c.prefetch_weights, c.offload_weights)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the rank that reports and writes saves)."""
        return self.rank == 0

    def train_update_passes(self, passes: list[Pass]) -> None:
        """Forward and backward over this rank's ``passes`` of one update (see the module)."""
        with self._activation_offload():
            if self.world == 1:
                self.forward_backward(passes)  # type: ignore[attr-defined]
            else:
                self._rank_passes(passes)

    def _activation_offload(self) -> contextlib.AbstractContextManager:
        """``offload.activations``: saved activations kept in host memory until backward."""
        if not self.cfg.offload_activations:
            return contextlib.nullcontext()
        return torch.autograd.graph.save_on_cpu(pin_memory=self.device.type == "cuda")

    def _rank_passes(self, passes: list[Pass]) -> None:
        count = D.max_over_ranks(len(passes))
        for i in range(count):
            if self.sharded:
                last = i == count - 1
                D.set_gradient_sync(self._body, last or not self.cfg.sync_once_per_update)
            if i < len(passes):
                self.forward_backward([passes[i]])  # type: ignore[attr-defined]
            else:
                self._idle_pass()

    def _idle_pass(self) -> None:
        """A forward and backward whose loss is 0: the collectives of a pass, no gradient."""
        ids = torch.zeros((1, 2), dtype=torch.long, device=self.device)
        pos = torch.arange(2, device=self.device)[None]
        segments = {SEGMENTS_KWARG: [0, 2]} if self._packed_attention else {}
        self.model.train()
        with self.compute_context():  # type: ignore[attr-defined]
            hidden = self._body(
                input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False, **segments
            ).last_hidden_state
        (hidden.float().sum() * 0.0).backward()

    def _combine_update(self) -> None:
        """Sum the update's loss and token counts over the ranks; sum replica gradients."""
        if self.world == 1:
            return
        pend = self._pending
        loss, sup, tokens, largest = D.all_sum(
            [pend.loss_sum, pend.supervised, pend.tokens, pend.largest_pass]
        )
        pend.loss_sum, pend.supervised, pend.tokens = loss, int(sup), int(tokens)
        pend.largest_pass = int(largest)
        if not self.sharded:
            D.reduce_replica_grads(list(self.params.values()), D.torch_dtype(self.cfg.reduce_dtype))

    def _clip_sharded(self, params: list[Tensor], max_norm: float) -> float:
        """``clip_grad_norm_`` over shards: the global norm from every rank's shards, then
        the same clip factor (``max_norm / (norm + 1e-6)``, at most 1) on each rank."""
        grads = [p.grad for p in params if p.grad is not None]
        norm = D.global_norm(grads, True)
        factor = max_norm / (norm + 1e-6)
        if factor < 1.0 and math.isfinite(norm):
            for g in grads:
                D.local(g).mul_(factor)
        return norm

    def _norm(self, tensors: list[Tensor]) -> float:
        return D.global_norm(tensors, self.sharded)

    # ----------------------------------------------------------------- saves
    def _full_adapter(self) -> dict[str, Tensor]:
        """Every adapter tensor whole, on CPU (a collective when sharded)."""
        return {n: D.full_tensor(p) for n, p in self.params.items()}

    def _full_optimizer(self) -> dict[str, Any]:
        """The optimizer's state dict with whole tensors (a collective when sharded)."""
        sd = self.optimizer.state_dict()  # its per-parameter dicts are the live state: copy
        sd["state"] = {
            pid: {k: D.full_tensor(v) if isinstance(v, Tensor) else v for k, v in state.items()}
            for pid, state in sd["state"].items()
        }
        return sd

    def _check_replicas(self, sd: dict[str, Any]) -> None:
        """``checkpoint.compare_replicas``: with sharding ``none``, every rank must hold the
        optimizer state rank 0 holds, before the first save.

        Raises:
            EngineError: the largest difference between a rank's state and rank 0's."""
        if self.world == 1 or self.sharded or not self.cfg.compare_replicas:
            return
        tensors = [
            v.double().reshape(-1)
            for s in sd["state"].values()
            for v in s.values()
            if isinstance(v, Tensor)
        ]
        flat = torch.cat(tensors) if tensors else torch.zeros(1)
        if self.cfg.extra.get("perturb_replica") and self.rank:  # tests only: a drifted rank
            flat = flat + 1e-3
        diff = D.replica_difference(flat)
        if diff > 0:
            raise EngineError(
                f"the ranks hold different optimizer state before the save at step "
                f"{self.step} (largest difference {diff:.3g}); the replicas of "
                "execution.memory.sharding none have drifted apart.",
                code="replicas_differ",
                field="config.engineSettings.checkpoint.compare_replicas",
            )

    def _set_param(self, param: Tensor, full: Tensor) -> None:
        """Copy the whole tensor ``full`` into ``param`` (into this rank's shard)."""
        with torch.no_grad():
            D.local(param).copy_(D.local(D.shard_like(param, full.to(param.dtype))))

    def _place_optimizer(self, sd: dict[str, Any]) -> dict[str, Any]:
        """A saved (whole-tensor) optimizer state dict placed like this rank's parameters."""
        if not self.sharded:
            return sd
        ids = [i for g in sd["param_groups"] for i in g["params"]]
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        by_id = dict(zip(ids, params, strict=True))
        for pid, state in sd["state"].items():
            p = by_id[pid]
            for key, value in list(state.items()):
                if isinstance(value, Tensor) and value.shape == p.shape:
                    state[key] = D.shard_like(p, value.to(p.dtype))
        return sd
