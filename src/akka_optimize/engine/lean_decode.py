"""Lean decoding steps for Llama-family models (issue 24 item 3): endpoints, evaluations
and reinforcement rollouts decode with them.

Decoding one token of a small model on a CPU is bound by reading the weights and by
Python: transformers' generic forward (mask building, cache classes, the attention
dispatch, about 60 tensor ops per layer) costs SmolLM2-135M about 7 ms per token of the
26 ms a bf16 step takes on two cores, so the step runs well below the rate at which the
machine reads the weights. :class:`LeanDecoder` runs the decoding steps after the
prompt (one token per row) as the model's own computation written out directly: per
layer RMSNorm, the q/k/v projections, rotary embedding (the model's own rotary module,
so every rope scaling it knows applies), scaled dot-product attention over a KV cache
held in preallocated buffers that grow in blocks, the output projection, RMSNorm and the
gated MLP; then the final norm and the output head. The prompt itself is read by the
model's own forward (transformers), whose KV cache seeds the buffers.

It reads the weights of the model's modules when a batch starts, so an adapter merged
into the base weights (``serving.mergeAdapters``) is decoded as merged. An adapter
beside its base modules (a training session's, during a rollout; an endpoint's with
``mergeAdapters: false``) is computed as PEFT's ``lora.Linear`` computes it: the base
product, then for each active adapter ``B(A(x)) · scaling`` added, with the input cast to
the adapter's dtype unless the layer's ``cast_input_dtype_enabled`` is off (the engine's
mixed precision turns it off), and the sum cast back to the base product's dtype. It
declines (:meth:`LeanDecoder.for_model` returns None) for adapters it does not reproduce
(DoRA and other LoRA variants, LoRA on embeddings, ``modules_to_save`` copies, dropout in
training mode, a merged adapter that is disabled) and for every architecture it does not
reproduce exactly: ``llama`` (SmolLM2, Llama 3) and ``qwen3`` (Llama plus a per-head
RMSNorm of queries and keys) with SiLU MLPs and full attention in every layer. Anything
else decodes through transformers as before.

Answers: the same operations in the same order as transformers' sdpa path, including
its way of attending with grouped heads (``enable_gqa`` without a mask; with a padding
mask, each group's queries as positions over its key/value head), so the logits are bit
for bit those of the model's forward, in fp32 and in bf16
(``tests/serving/test_serving_lean_decode.py``: both architectures, left padding, rows
leaving, buffers growing; and an engine's answers with and without the lean steps;
``tests/engine/test_engine_lean_rollout.py``: an unmerged adapter in fp32 and under the
engine's bf16 mixed precision, and a rollout's samples with and without the lean steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: ``config.model_type`` values the lean steps reproduce.
ARCHITECTURES = ("llama", "qwen3")

#: KV buffers grow by at least this many positions at a time.
GROW_BLOCK = 256


@dataclass
class _Layer:
    """One decoder layer's weights (and biases, None where the module has none)."""

    norm_in: Any
    norm_post: Any
    q: _Linear
    k: _Linear
    v: _Linear
    o: _Linear
    gate: _Linear
    up: _Linear
    down: _Linear
    q_norm: Any = None
    k_norm: Any = None


@dataclass
class _Linear:
    """A linear module's base ``weight`` and ``bias`` and, for a LoRA layer whose adapters
    compute beside it, ``lora``: per active adapter ``(layer, A, B, B's bias, scaling)``."""

    weight: Any
    bias: Any = None
    lora: tuple[tuple[Any, Any, Any, Any, float], ...] = ()


class _Declined(Exception):
    """A module the lean steps would not compute as the model's forward does."""


def _linear(module: Any) -> _Linear:
    """The :class:`_Linear` of a linear module or of a PEFT LoRA layer around one.

    Raises:
        _Declined: a LoRA layer computed otherwise than vanilla LoRA (see the module
            docstring).
    """
    if not hasattr(module, "lora_A"):
        return _Linear(module.weight, getattr(module, "bias", None))
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(module, LoraLinear):
        raise _Declined(type(module).__name__)
    base = module.get_base_layer()
    if module.disable_adapters:
        if module.merged:  # PEFT unmerges it in the forward
            raise _Declined("a merged adapter, disabled")
        return _Linear(base.weight, base.bias)
    if module.merged:  # the forward is the base layer's, merged weights and all
        return _Linear(base.weight, base.bias)
    lora = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}) or module.use_dora.get(name):
            raise _Declined(f"LoRA variant of adapter {name}")
        drop = module.lora_dropout[name]
        if drop.training and float(getattr(drop, "p", 0.0)) > 0:
            raise _Declined("dropout in training mode")
        a, b = module.lora_A[name], module.lora_B[name]
        lora.append((module, a.weight, b.weight, b.bias, module.scaling[name]))
    return _Linear(base.weight, base.bias, tuple(lora))


def _apply(x: Any, lin: _Linear) -> Any:
    """``lin`` applied to ``x`` as the model's forward applies it: ``F.linear``, then, for
    a LoRA layer, PEFT's ``lora.Linear.forward`` (peft 0.21) step for step."""
    import torch.nn.functional as fn

    out = fn.linear(x, lin.weight, lin.bias)
    if not lin.lora:
        return out
    dtype = out.dtype
    for layer, a, b, b_bias, scaling in lin.lora:
        if getattr(layer, "cast_input_dtype_enabled", True) and x.dtype != a.dtype:
            x = x.to(a.dtype)
        out = out + fn.linear(fn.linear(x, a), b, b_bias) * scaling
    return out.to(dtype)


def _other_adapters(model: Any, covered: set[int]) -> bool:
    """Whether ``model`` holds an adapter piece the lean steps do not read: a LoRA layer
    other than the layers' projections and the head (an embedding's), or a
    ``modules_to_save`` / trainable-tokens wrapper."""
    for m in model.modules():
        kind = type(m).__name__
        if kind in ("ModulesToSaveWrapper", "TrainableTokensWrapper", "TrainableTokensLayer"):
            return True
        if hasattr(m, "lora_A") and id(m) not in covered:
            return True
    return False


def _supported(cfg: Any) -> bool:
    if getattr(cfg, "model_type", None) not in ARCHITECTURES:
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return False
    if getattr(cfg, "pretraining_tp", 1) not in (None, 1):
        return False
    if getattr(cfg, "use_sliding_window", False):
        return False
    kinds = getattr(cfg, "layer_types", None) or []
    return all(k == "full_attention" for k in kinds)


class LeanDecoder:
    """Decoding steps (one new token per row) for a supported model; see the module
    docstring. Build with :meth:`for_model`, seed with :meth:`start`, then call
    :meth:`step` per token and :meth:`keep` when rows leave the batch.
    """

    def __init__(self, model: Any) -> None:
        import torch

        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        cfg = inner.config
        body = inner.model
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(
            getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        )
        self.eps = float(cfg.rms_norm_eps)
        self.embed = body.embed_tokens.weight
        self.rotary = body.rotary_emb
        self.final_norm = body.norm.weight
        self._read: set[int] = set()  # ids of the linear modules read
        self.head = self._linear(inner.lm_head)
        self.layers: list[_Layer] = []
        for layer in body.layers:
            a, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                _Layer(
                    norm_in=layer.input_layernorm.weight,
                    norm_post=layer.post_attention_layernorm.weight,
                    q=self._linear(a.q_proj),
                    k=self._linear(a.k_proj),
                    v=self._linear(a.v_proj),
                    o=self._linear(a.o_proj),
                    gate=self._linear(mlp.gate_proj),
                    up=self._linear(mlp.up_proj),
                    down=self._linear(mlp.down_proj),
                    q_norm=a.q_norm.weight if hasattr(a, "q_norm") else None,
                    k_norm=a.k_norm.weight if hasattr(a, "k_norm") else None,
                )
            )
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.length = 0
        self._torch = torch

    def _linear(self, module: Any) -> _Linear:
        self._read.add(id(module))
        return _linear(module)

    @classmethod
    def for_model(cls, model: Any) -> LeanDecoder | None:
        """A decoder over ``model``'s current weights, or None where the lean steps would
        not compute what ``model``'s forward computes (see the module docstring)."""
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        if not _supported(getattr(inner, "config", None)):
            return None
        body = getattr(inner, "model", None)
        if body is None or not hasattr(body, "rotary_emb") or not hasattr(body, "layers"):
            return None
        try:
            dec = cls(model)
        except _Declined:
            return None
        if _other_adapters(model, dec._read):
            return None
        return dec

    # the KV cache ---------------------------------------------------------------
    def start(self, cache: Any, room: int) -> bool:
        """Seed the buffers from a transformers KV cache after the prompt (keys and values
        of shape ``[rows, kv_heads, prompt, head_dim]`` per layer), with ``room`` more
        positions free, at most :data:`GROW_BLOCK` (the buffers grow as the answers do, so
        a large ``max_tokens`` reserves nothing up front). False (and nothing kept) when
        ``cache`` is not laid out that way."""
        torch = self._torch
        layers = getattr(cache, "layers", None)
        if layers is None or len(layers) != len(self.layers):
            return False
        for entry in layers:
            k, v = getattr(entry, "keys", None), getattr(entry, "values", None)
            if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor) or k.dim() != 4:
                return False
        self.length = int(layers[0].keys.shape[2])
        cap = self.length + min(max(int(room), 1), GROW_BLOCK)
        self.keys, self.values = [], []
        for entry in layers:
            k, v = entry.keys, entry.values
            kb = k.new_empty((k.shape[0], k.shape[1], cap, k.shape[3]))
            vb = v.new_empty((v.shape[0], v.shape[1], cap, v.shape[3]))
            kb[:, :, : self.length] = k
            vb[:, :, : self.length] = v
            self.keys.append(kb)
            self.values.append(vb)
        return True

    def _grow(self) -> None:
        torch = self._torch
        cap = self.keys[0].shape[2]
        more = max(GROW_BLOCK, cap // 2)
        for i in range(len(self.keys)):
            for bufs in (self.keys, self.values):
                old = bufs[i]
                pad = old.new_empty((old.shape[0], old.shape[1], more, old.shape[3]))
                bufs[i] = torch.cat([old, pad], dim=2)

    def keep(self, rows: Any) -> None:
        """Keep only ``rows`` (int64 indices) of the batch in the buffers."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]

    # one step ---------------------------------------------------------------------
    def _norm(self, x: Any, weight: Any) -> Any:
        """RMSNorm as transformers' Llama/Qwen3 computes it: fp32 statistics, the
        product with the weight in the input's dtype."""
        torch = self._torch
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(x.dtype)

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        torch = self._torch
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x * cos) + (rotated * sin)

    def step(self, ids: Any, positions: Any = None, mask: Any = None) -> Any:
        """Logits ``[rows, vocab]`` (the model's dtype) for one new token per row.

        Args:
            ids: int64 ``[rows, 1]``, the tokens chosen at the previous step.
            positions: int64 ``[rows, 1]`` position ids (left-padded rows), or None: every
                row at position :attr:`length` (no padding).
            mask: ``[rows, length + 1]`` attention mask over the cache and this token
                (1 attend, 0 padding), or None (attend to everything).
        """
        torch = self._torch
        fn = torch.nn.functional
        rows = ids.shape[0]
        t = self.length
        if t >= self.keys[0].shape[2]:
            self._grow()
        h = fn.embedding(ids, self.embed)  # [rows, 1, hidden]
        if positions is None:
            positions = torch.full((rows, 1), t, dtype=torch.long, device=ids.device)
        cos, sin = self.rotary(h, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        attn_mask = None
        if mask is not None:
            attn_mask = mask.to(torch.bool).view(rows, 1, 1, -1)
        hd, heads, kvh = self.head_dim, self.heads, self.kv_heads
        for i, w in enumerate(self.layers):
            x = self._norm(h, w.norm_in)
            q = _apply(x, w.q).view(rows, 1, heads, hd)
            k = _apply(x, w.k).view(rows, 1, kvh, hd)
            v = _apply(x, w.v).view(rows, 1, kvh, hd).transpose(1, 2)
            if w.q_norm is not None:
                q, k = self._norm(q, w.q_norm), self._norm(k, w.k_norm)
            q = self._rope(q.transpose(1, 2), cos, sin)
            k = self._rope(k.transpose(1, 2), cos, sin)
            self.keys[i][:, :, t : t + 1] = k
            self.values[i][:, :, t : t + 1] = v
            keys, values = self.keys[i][:, :, : t + 1], self.values[i][:, :, : t + 1]
            if attn_mask is None or kvh == heads:
                o = fn.scaled_dot_product_attention(
                    q, keys, values, attn_mask=attn_mask, enable_gqa=kvh != heads
                )
            else:  # as transformers does with a mask: a group's queries as positions
                o = fn.scaled_dot_product_attention(
                    q.reshape(rows, kvh, heads // kvh, hd), keys, values, attn_mask=attn_mask
                ).reshape(rows, heads, 1, hd)
            h = h + _apply(o.transpose(1, 2).reshape(rows, 1, heads * hd), w.o)
            x = self._norm(h, w.norm_post)
            h = h + _apply(fn.silu(_apply(x, w.gate)) * _apply(x, w.up), w.down)
        self.length = t + 1
        return _apply(self._norm(h, self.final_norm), self.head)[:, -1, :]
