"""One optimizer update of a minifield strategy: packed forward, objective, AdamW.

Every packed row runs alone (batch 1) with ``position_ids`` restarting per conversation
and the engine's per-conversation attention (:mod:`akka_optimize.engine.attention`), so
packed conversations never see each other. The body's hidden states are gathered at the
positions whose next token is supervised and projected by the (tied) LM head
``projection_chunk_size`` positions at a time; each chunk's loss is back-propagated at
once, then the body receives the summed hidden-state gradient (the pattern of
:func:`akka_optimize.engine.head.chunked_loss`).

Objective per update (token-weighted, DESIGN.md "Losses are token-weighted"), with
``N`` the update's supervised target positions:

* packed SFT (12.0.0): ``CE = Σ −log p(target) / N``;
* two-stage: ``CE_routing / N_routing + CE_arguments / N_arguments`` (each stage normalised
  by its own count, so the short routing target is not drowned by long arguments);
* packed QAT (13.0.0): ``w_ce · CE/N + w_kl · T² · Σ KL(p_dense,T ‖ p_qat,T) / N``, where
  ``p_dense`` comes from the job's dense starting weights, ``T`` is
  ``training.qat.distillation_temperature``, and a weight of 0 drops its term.

The forward runs under ``torch.autocast`` to ``compute_dtype`` (BF16 by default) over FP32
master weights; AdamW's state is FP32.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from akka_optimize.engine.attention import SEGMENTS_KWARG

from .plan import PackedRow, Plan
from .recipe import PackedTraining, QatTraining
from .rows import ARGUMENTS, ROUTING


@dataclass
class Net:
    """A causal LM split for the packed forward (teacher or student)."""

    body: nn.Module
    head: nn.Module
    cap: float | None
    packed_attention: bool


@dataclass
class Trainer:
    """The trained model, its optimizer and the strategy's objective."""

    model: nn.Module
    net: Net
    teacher: Net | None
    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    training: PackedTraining
    two_stage: bool
    device: torch.device

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to BF16 when ``compute_dtype`` is bfloat16, else nothing."""
        if self.training.compute_dtype == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _stage_weights(self, plan: Plan, mbs: list[list[int]]) -> tuple[dict[int, float], float]:
        """Per-stage CE weight of one token and the KL weight of one position."""
        rows = [plan.rows[i] for mb in mbs for i in mb]
        n = sum(r.supervised for r in rows)
        if self.two_stage:
            nr = sum(1 for r in rows for s in r.stage if s == ROUTING)
            na = sum(1 for r in rows for s in r.stage if s == ARGUMENTS)
            return {ROUTING: 1.0 / nr if nr else 0.0, ARGUMENTS: 1.0 / na if na else 0.0}, 0.0
        ce, kl = 1.0, 0.0
        if isinstance(self.training, QatTraining):
            ce, kl = self.training.qat.cross_entropy_weight, self.training.qat.distillation_weight
        return {ROUTING: ce / n, ARGUMENTS: ce / n}, kl / n

    def update(self, plan: Plan, mbs: list[list[int]]) -> dict[str, Any]:
        """Run one update over its microbatches; returns its metrics.

        Returns:
            ``{"loss", "grad_norm", "update_norm", "input_tokens", "supervised_tokens",
            "step_time_s"}`` plus ``cross_entropy`` and ``distillation`` (QAT) or
            ``routing_loss`` and ``argument_loss`` (two-stage).
        """
        started = time.perf_counter()
        weights, kl_w = self._stage_weights(plan, mbs)
        sums = {"ce": 0.0, "kl": 0.0, ROUTING: 0.0, ARGUMENTS: 0.0}
        tokens = supervised = 0
        for mb in mbs:
            for i in mb:
                row = plan.rows[i]
                tokens += len(row.input_ids)
                supervised += row.supervised
                self._row(row, weights, kl_w, sums)
        grad_norm = _clip(self.params, self.training.optimizer.max_grad_norm)
        before = [p.detach().clone() for p in self.params]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        upd = math.sqrt(
            sum(
                float((p.detach() - b).double().pow(2).sum())
                for p, b in zip(self.params, before, strict=True)
            )
        )
        out: dict[str, Any] = {
            "loss": sums["ce"] + sums["kl"],
            "grad_norm": grad_norm,
            "update_norm": upd,
            "input_tokens": tokens,
            "supervised_tokens": supervised,
        }
        if self.two_stage:
            out |= {"routing_loss": sums[ROUTING], "argument_loss": sums[ARGUMENTS]}
        elif isinstance(self.training, QatTraining):
            out |= {"cross_entropy": sums["ce"], "distillation": sums["kl"]}
        out["step_time_s"] = time.perf_counter() - started
        return out

    def _hidden(self, net: Net, row: PackedRow, idx_S: Tensor) -> Tensor:
        segments = {SEGMENTS_KWARG: list(row.cu_seqlens)} if net.packed_attention else {}
        dev = self.device
        hidden = net.body(
            input_ids=torch.tensor(row.input_ids, dtype=torch.long)[None].to(dev),
            position_ids=torch.tensor(row.position_ids, dtype=torch.long)[None].to(dev),
            attention_mask=None,
            use_cache=False,
            **segments,
        ).last_hidden_state[0]
        return hidden.index_select(0, idx_S)

    def _row(self, row: PackedRow, weights: dict[int, float], kl_w: float, sums: dict) -> None:
        stage_T = torch.tensor(row.stage, dtype=torch.long)
        idx_S = (stage_T[1:] != 0).nonzero().squeeze(1)  # hidden t predicts token t+1
        if idx_S.numel() == 0:
            return
        dev = self.device
        targets_S = torch.tensor(row.input_ids, dtype=torch.long)[1:][idx_S].to(dev)
        stage_S = stage_T[1:][idx_S].to(dev)
        w_S = torch.tensor([weights[int(s)] for s in stage_T[1:][idx_S]], dtype=torch.float64)
        w_S = w_S.to(dev)
        idx_S = idx_S.to(dev)
        with self.autocast():
            h_S = self._hidden(self.net, row, idx_S)
            t_S = None
            if self.teacher is not None and kl_w:
                with torch.no_grad():
                    t_S = self._hidden(self.teacher, row, idx_S)
            leaf = h_S.detach().requires_grad_(True)
            chunk = self.training.projection_chunk_size
            for start in range(0, int(idx_S.numel()), chunk):
                sl = slice(start, start + chunk)
                self._chunk(leaf[sl], targets_S[sl], stage_S[sl], w_S[sl], t_S, sl, kl_w, sums)
        if leaf.grad is not None:
            h_S.backward(leaf.grad)

    def _chunk(self, h, targets, stage, w, t_S, sl, kl_w, sums) -> None:
        logits = _logits(self.net, h)
        logp = torch.log_softmax(logits, dim=-1)
        tok = -logp.gather(1, targets[:, None]).squeeze(1).double()
        ce = (w * tok).sum()
        total = ce
        sums["ce"] += float(ce.detach())
        if self.two_stage:
            for s in (ROUTING, ARGUMENTS):
                sums[s] += float((w * tok.detach())[stage == s].sum())
        if t_S is not None:
            temp = self.training.qat.distillation_temperature  # type: ignore[attr-defined]
            with torch.no_grad():
                t_logp = torch.log_softmax(_logits(self.teacher, t_S[sl]) / temp, dim=-1)
            s_logp = torch.log_softmax(logits / temp, dim=-1)
            kl_tok = (t_logp.exp() * (t_logp - s_logp)).sum(-1).double()
            kl = kl_w * temp * temp * kl_tok.sum()
            total = total + kl
            sums["kl"] += float(kl.detach())
        total.backward()


def _logits(net: Net | None, h: Tensor) -> Tensor:
    assert net is not None
    logits = net.head(h).float()
    return torch.tanh(logits / net.cap) * net.cap if net.cap else logits


def _clip(params: list[nn.Parameter], max_norm: float) -> float:
    """The global gradient norm before clipping; clips to ``max_norm`` when above 0."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    )
