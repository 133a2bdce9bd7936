"""The passes of a :class:`~akka_optimize.engine.session.training.TrainingSession`:
``forward_backward`` and ``forward`` over packed :class:`~akka_optimize.data.types.Pass`
objects (one forward each, batch dimension 1), the loss of each, and the accounting of
what an update has accumulated so far (:class:`_Pending`) until ``optim_step`` applies it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ...data.types import Pass
from ..attention import SEGMENTS_KWARG
from ..config import EngineConfig
from ..errors import EngineError, EngineOutOfMemory
from ..head import chunked_loss, head_logprobs
from ..losses import LOSSES, REINFORCEMENT_INPUTS, SEQUENCE_LOSSES


class ForwardBackwardResult(NamedTuple):
    """What one ``forward_backward`` / ``forward`` call returns.

    Attributes:
        loss_sum: the summed loss over every scored token of every pass (not a mean).
        supervised_tokens: scored tokens (non-zero weight) over all passes.
        logprobs: per pass, float32 [T] on CPU: log p(input_ids[t] | input_ids[:t]) at
            scored positions, 0.0 elsewhere (aligned like ``Pass.weights``).
    """

    loss_sum: float
    supervised_tokens: int
    logprobs: list[Tensor]


@dataclass
class Pending:
    loss_sum: float = 0.0
    supervised: int = 0
    tokens: int = 0
    largest_pass: int = 0
    started: float | None = None


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text
    )


class PassesMixin:
    """``forward_backward`` / ``forward`` of :class:`~akka_optimize.engine.session.training.TrainingSession`
    (which sets the attributes annotated here)."""

    cfg: EngineConfig
    device: torch.device
    dtype: torch.dtype
    weight_dtype: torch.dtype
    adapter_dtype: torch.dtype
    step: int
    model: Any
    optimizer: torch.optim.Optimizer
    _packed_attention: bool
    _body: Any
    _head: Any
    _cap: Any
    _pending: Pending

    def _run_pass(
        self,
        p: Pass,
        loss_fn: str,
        inputs: dict[str, list[float]] | None,
        config: dict,
        backward: bool,
    ) -> tuple[float, int, Tensor]:
        dev = self.device
        ids_T = torch.tensor(p.input_ids, dtype=torch.long)
        w_T = torch.tensor(p.weights, dtype=torch.float32)
        idx_S = (w_T[1:] != 0).nonzero().squeeze(1)  # hidden position t predicts token t+1
        out_T = torch.zeros(len(p.input_ids), dtype=torch.float32)
        if idx_S.numel() == 0:
            return 0.0, 0, out_T
        loss_inputs = {"weights": w_T[1:][idx_S].double().to(dev)}
        for key in REINFORCEMENT_INPUTS if loss_fn != "cross_entropy" else ():
            if not inputs or key not in inputs:
                raise EngineError(
                    f"loss {loss_fn} needs {key} for every token of each pass (rows {p.rows})."
                )
        for key, values in (inputs or {}).items():  # a given "weights" replaces the pass's
            if len(values) != len(p.input_ids):
                raise EngineError(
                    f"loss input {key} has {len(values)} values for a pass of "
                    f"{len(p.input_ids)} tokens (rows {p.rows})."
                )
            loss_inputs[key] = torch.tensor(values, dtype=torch.float64)[1:][idx_S].to(dev)
        fn = LOSSES[loss_fn]
        with self.compute_context():
            return self._run_pass_body(p, ids_T, idx_S, out_T, loss_inputs, fn, config, backward)

    def compute_context(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` to the compute dtype when the adapter (or the base) is stored in
        another one: the adapter's matrix products then run in the compute dtype too.

        Inside it, PEFT's LoRA layers keep their input in the compute dtype. PEFT casts a
        layer's input to the adapter's dtype first (bf16 → fp32 for an fp32 adapter over a
        bf16 base), and autocast casts it straight back for the product: an exact round
        trip, but two copies of every adapted layer's activations in forward and two in
        backward (about a quarter of a GPU update's kernel time, issue 24). Leaving the
        input alone gives the same numbers without them (tests/engine/test_engine_precision).

        fp32 compute under a bf16 adapter (``weightPrecision: bf16`` on CPU, where compute
        defaults to fp32) runs without autocast, which only lowers a product's precision
        and has no fp32 target: PEFT casts each LoRA layer's input to bf16, the adapter's
        products run in bf16 (its weights' precision) and their sum is cast back to fp32
        (issue 47: with autocast off and PEFT's casts off, the bf16 adapter met an fp32
        input at step 0, "expected m1 and m2 to have the same dtype").
        """
        if self.dtype == torch.float32 or self.dtype == self.weight_dtype == self.adapter_dtype:
            return contextlib.nullcontext()
        return _mixed_precision(self)

    def _run_pass_body(
        self,
        p: Pass,
        ids_T: Tensor,
        idx_S: Tensor,
        out_T: Tensor,
        loss_inputs: dict[str, Tensor],
        fn: Any,
        config: dict,
        backward: bool,
    ) -> tuple[float, int, Tensor]:
        dev = self.device
        segments = {SEGMENTS_KWARG: list(p.cu_seqlens)} if self._packed_attention else {}
        hidden = self._body(
            input_ids=ids_T[None].to(dev),
            position_ids=torch.tensor(p.position_ids, dtype=torch.long)[None].to(dev),
            attention_mask=None,
            use_cache=False,
            **segments,
            **self._vision_inputs(p),
        ).last_hidden_state[0]
        idx_dev = idx_S.to(dev)
        per_sequence = SEQUENCE_LOSSES.get(getattr(fn, "__name__", ""))
        if per_sequence is not None:  # GSPO: the whole pass's detached log-probs first
            loss_inputs[per_sequence.__name__] = self._sequence_input(
                hidden.index_select(0, idx_dev), ids_T[1:][idx_S].to(dev), loss_inputs, per_sequence
            )
        loss, lp_S = chunked_loss(
            self._head,
            hidden.index_select(0, idx_dev),
            ids_T[1:][idx_S].to(dev),
            self._cap,
            self.cfg.head_chunk_tokens,
            lambda lp, sl: fn(lp, {k: v[sl] for k, v in loss_inputs.items()}, config),
            backward=backward,
        )
        out_T[idx_S + 1] = lp_S.float().cpu()
        return loss, int(idx_S.numel()), out_T

    def _vision_inputs(self, p: Pass) -> dict[str, Tensor]:
        return vision_tensors(p.vision, self.device, self.weight_dtype)

    @torch.no_grad()
    def _sequence_input(
        self,
        hidden_SH: Tensor,
        targets_S: Tensor,
        loss_inputs: dict[str, Tensor],
        per_sequence: Any,
    ) -> Tensor:
        """A per-sequence loss input (:data:`~akka_optimize.engine.losses.SEQUENCE_LOSSES`)
        over the pass's scored tokens, repeated at each: one pass is one sequence (a
        Tinker datum)."""
        step = self.cfg.head_chunk_tokens
        lp_S = torch.cat(
            [
                head_logprobs(
                    self._head, hidden_SH[i : i + step], targets_S[i : i + step], self._cap
                )
                for i in range(0, hidden_SH.shape[0], step)
            ]
        ).double()
        try:
            value = per_sequence(lp_S, loss_inputs)
        except ValueError as exc:
            raise EngineError(str(exc)) from exc
        return value.expand(lp_S.shape[0]).clone()

    def _passes(
        self,
        passes: list[Pass],
        loss_fn: str,
        loss_inputs: list[dict[str, list[float]]] | None,
        loss_config: dict | None,
        backward: bool,
    ) -> ForwardBackwardResult:
        if loss_fn not in LOSSES:
            raise EngineError(f"unknown loss_fn {loss_fn!r}; use one of {sorted(LOSSES)}.")
        total, tokens, lps = 0.0, 0, []
        for i, p in enumerate(passes):
            inputs = loss_inputs[i] if loss_inputs else None
            try:
                loss, n, lp = self._run_pass(p, loss_fn, inputs, loss_config or {}, backward)
            except Exception as exc:
                if _is_oom(exc):
                    raise EngineOutOfMemory(
                        step=self.step + 1,
                        micro_batch=len(p.rows) or 1,
                        pass_tokens=p.num_tokens,
                        device=self.device.type,
                    ) from exc
                raise
            total, tokens = total + loss, tokens + n
            lps.append(lp)
        return ForwardBackwardResult(total, tokens, lps)

    def forward_backward(
        self,
        passes: list[Pass],
        loss_fn: str = "cross_entropy",
        *,
        loss_inputs: list[dict[str, list[float]]] | None = None,
        loss_config: dict | None = None,
    ) -> ForwardBackwardResult:
        """Forward and backward over ``passes``; gradients of the loss **sum** accumulate.

        Args:
            passes: packed passes, one forward each (batch dimension 1).
            loss_fn: cross_entropy | importance_sampling | ppo | cispo | dro.
            loss_inputs: per pass, for the reinforcement losses, ``sampling_logprobs`` and
                ``advantages`` lists of length T aligned like ``Pass.weights``; the
                positions scored are those with a non-zero weight. A ``weights`` list
                here is what the loss weighs by, while ``Pass.weights`` then only chooses
                the scored positions (the Tinker API scores every target token).
            loss_config: loss parameters (``clip_low_threshold``, ``clip_high_threshold``, ``beta``).

        Raises:
            EngineOutOfMemory: the device ran out of memory.
            EngineError: unknown loss or missing reinforcement inputs.
        """
        pend = self._pending
        if pend.started is None:
            pend.started = time.perf_counter()
        self.model.train()
        res = self._passes(passes, loss_fn, loss_inputs, loss_config, backward=True)
        pend.loss_sum += res.loss_sum
        pend.supervised += res.supervised_tokens
        pend.tokens += sum(p.num_tokens for p in passes)
        pend.largest_pass = max([pend.largest_pass] + [p.num_tokens for p in passes])
        return res

    @torch.no_grad()
    def forward(
        self, passes: list[Pass], loss_fn: str = "cross_entropy", **kw: Any
    ) -> ForwardBackwardResult:
        """Like :meth:`forward_backward` without gradients, in eval mode (no dropout)."""
        self.model.eval()
        try:
            return self._passes(
                passes, loss_fn, kw.get("loss_inputs"), kw.get("loss_config"), backward=False
            )
        finally:
            self.model.train()

    def _reset(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._pending = Pending()


def vision_tensors(
    vision: dict[str, Any] | None, device: torch.device, dtype: torch.dtype
) -> dict[str, Tensor]:
    """An image row's vision inputs (``Pass.vision`` / ``Example.vision``: the processor's
    ``pixel_values`` and the family's others, batch dimension 1) as keyword arguments of
    the model's forward on ``device``: floats in ``dtype`` (the frozen weights'), integers
    as int64. The vision tower is frozen: no LoRA target is in it and its weights have no
    gradient (:mod:`akka_optimize.data.vision`, F031)."""
    out: dict[str, Tensor] = {}
    for key, value in (vision or {}).items():
        t = torch.as_tensor(value)
        out[key] = t.to(device, dtype=dtype if t.is_floating_point() else torch.long)
    return out


@contextlib.contextmanager
def _mixed_precision(session: Any):
    """Autocast to ``session.dtype``, with PEFT's input casts off on every LoRA layer of
    ``session.model`` while the outermost such context is open (nesting is counted)."""
    layers = getattr(session, "_lora_layers", None)
    if layers is None:
        layers = [m for m in session.model.modules() if hasattr(m, "cast_input_dtype_enabled")]
        session._lora_layers = layers
        session._mixed_depth = 0
    with torch.autocast(session.device.type, dtype=session.dtype):
        session._mixed_depth += 1
        if session._mixed_depth == 1:
            for m in layers:
                m.cast_input_dtype_enabled = False
        try:
            yield
        finally:
            session._mixed_depth -= 1
            if session._mixed_depth == 0:
                for m in layers:
                    m.cast_input_dtype_enabled = True
