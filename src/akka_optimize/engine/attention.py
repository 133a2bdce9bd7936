"""Attention over packed conversations, one conversation at a time.

A pass packs several whole conversations into one sequence (``data.types.Pass``).
Left to itself, transformers isolates them with a dense ``T × T`` block-diagonal mask
(DESIGN.md "Verified facts"): attention then costs ``T²`` per layer although only
``Σ Lᵢ²`` scores are ever used, and the masked kernel is slower than the causal one.
With four GSM8K conversations per pass that was a third of a CPU update's time.

This module registers the attention implementation ``akka_packed``. When the engine
passes the pass's sequence boundaries (``akka_segments``: the ``cu_seqlens`` list
``[0, L1, L1+L2, …, T]``), each conversation attends to itself with
``scaled_dot_product_attention(is_causal=True)``; otherwise (generation with a KV
cache, sliding-window layers, soft-capped or sink attention, a batch of several rows)
it is exactly transformers' ``sdpa`` with transformers' own mask. The result equals
masked attention up to float rounding (tests/engine/test_attention.py).

On CUDA, with bf16 or fp16 activations, the whole pass goes to one variable-length
flash-attention call instead (``torch.nn.attention.varlen.varlen_attn``, in torch since
2.10: the ``cu_seqlens`` are its ``cu_seq_q``/``cu_seq_k``), so a pass of a hundred
conversations is one kernel, not a hundred or a padded batch (issue 24 item 4).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import Tensor, nn

PACKED_ATTENTION = "akka_packed"
"""The ``attn_implementation`` name this module registers."""
SEGMENTS_KWARG = "akka_segments"
"""The forward keyword that carries a pass's ``cu_seqlens`` (a list of ints)."""
LOOP_SEGMENTS = 8
"""Up to this many conversations run one ``sdpa`` call each; more are padded into one
batched call (fewer kernel launches on a GPU, same result)."""

_registered: set[str] = set()
_cu_cache: tuple[tuple[Any, ...], Tensor] | None = None
"""The last pass's ``cu_seqlens`` on its device: every layer of a pass reuses it."""


def register_with_transformers(name: str, forward: Any) -> str:
    """Register attention implementation ``name`` (``forward`` follows transformers'
    attention interface) with sdpa's masks, so every call that carries no segments is
    plain sdpa (idempotent); returns ``name``."""
    if name not in _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        AttentionInterface.register(name, forward)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
        _registered.add(name)
    return name


def register() -> str:
    """Register ``akka_packed`` with transformers (idempotent) and return its name."""
    return register_with_transformers(PACKED_ATTENTION, packed_attention_forward)


def implementation_for(config: Any, name: str) -> str | dict[str, str]:
    """The ``attn_implementation`` argument that gives a model's language model ``name``.

    A text-only config takes the name itself. A multimodal config (sub-configs such as
    ``text_config``, ``vision_config``, ``audio_config``: Gemma 3 4B, Gemma 4, Ministral 3)
    gets ``name`` for the top level and ``text_config``, and ``eager`` for the towers:
    training reads text only, so the towers never run, and some (Gemma 4's audio tower)
    cannot load with ``sdpa`` at all.
    """
    subs = getattr(config, "sub_configs", None) or {}
    if "text_config" not in subs:
        return name
    return {"": name, **{k: name if k == "text_config" else "eager" for k in subs}}


def supports_packed(config: Any) -> bool:
    """Whether a model's attention can run per conversation with plain causal sdpa.

    Soft-capped attention logits (Gemma 2) and learned attention sinks need the
    model's own kernels, so those models keep transformers' masked path.
    """
    text = getattr(config, "get_text_config", lambda: config)()
    return not getattr(text, "attn_logit_softcapping", None)


def one_packed_pass(
    module: nn.Module, query: Tensor, key: Tensor, segments: Any, kwargs: dict[str, Any]
) -> bool:
    """Whether an attention call is one packed pass a segment-aware kernel may take: its
    ``cu_seqlens`` given, one row, no KV cache (queries as long as keys), a causal layer
    without learned sinks. Anything else goes to transformers' own sdpa."""
    return (
        segments is not None
        and query.shape[0] == 1
        and query.shape[2] == key.shape[2]
        and kwargs.get("s_aux") is None
        and getattr(module, "is_causal", True)
    )


def packed_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers attention interface: query [B, Hq, T, D], key/value [B, Hkv, T, D].

    Returns:
        (attention output [B, T, Hq, D] in the query's dtype, ``None``).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop(SEGMENTS_KWARG, None)
    if (
        not one_packed_pass(module, query, key, segments, kwargs)
        or kwargs.get("sliding_window")
        or kwargs.get("softcap") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if _use_varlen(query, dropout):
        return _varlen(module, query, key, value, segments, scaling), None
    if len(segments) - 1 <= LOOP_SEGMENTS:
        outs = [
            sdpa_attention_forward(
                module,
                query[:, :, a:b],
                key[:, :, a:b],
                value[:, :, a:b],
                None,
                dropout=dropout,
                scaling=scaling,
                **kwargs,
            )[0]
            for a, b in zip(segments[:-1], segments[1:], strict=True)
        ]
        return torch.cat(outs, dim=1), None
    return _padded(module, query, key, value, segments, dropout, scaling, kwargs), None


def _padded(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    segments: list[int],
    dropout: float,
    scaling: float | None,
    kwargs: dict[str, Any],
) -> Tensor:
    """Conversations right-padded into a batch [n, H, Lmax, D], causal + key-padding mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dev = query.device
    lengths = [b - a for a, b in zip(segments[:-1], segments[1:], strict=True)]
    lmax = max(lengths)
    starts = torch.tensor(segments[:-1], device=dev)
    lens = torch.tensor(lengths, device=dev)
    offs = torch.arange(lmax, device=dev)
    valid = offs[None, :] < lens[:, None]  # [n, Lmax]
    # Padding slots read token 0 of their own conversation; the mask hides them as keys
    # and their query rows are dropped below.
    src = torch.where(valid, starts[:, None] + offs[None, :], starts[:, None])

    def batch(x: Tensor) -> Tensor:  # [1, H, T, D] -> [n, H, Lmax, D]
        return x[0][:, src].transpose(0, 1)

    causal = torch.ones(lmax, lmax, dtype=torch.bool, device=dev).tril()
    mask = causal[None] & valid[:, None, :]  # [n, Lmax(q), Lmax(k)]
    out = sdpa_attention_forward(
        module,
        batch(query),
        batch(key),
        batch(value),
        mask[:, None],
        dropout=dropout,
        scaling=scaling,
        **kwargs,
    )[0]  # [n, Lmax, H, D]
    return out[valid][None]  # [1, T, H, D] in pass order


def varlen_kernel() -> Any | None:
    """torch's variable-length flash attention (``varlen_attn``), or None where this torch
    has none (before 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@functools.lru_cache(maxsize=4)
def _keywords(kernel: Any) -> frozenset[str]:
    return frozenset(inspect.signature(kernel).parameters)


def _use_varlen(query: Tensor, dropout: float) -> bool:
    """The flash kernel runs on CUDA in half precision and has no attention dropout."""
    return (
        query.is_cuda
        and query.dtype in (torch.bfloat16, torch.float16)
        and not dropout
        and varlen_kernel() is not None
    )


def _cu_seqlens(segments: list[int], device: torch.device) -> Tensor:
    global _cu_cache
    key = (tuple(segments), device)
    if _cu_cache is None or _cu_cache[0] != key:
        _cu_cache = (key, torch.tensor(segments, dtype=torch.int32, device=device))
    return _cu_cache[1]


def _varlen(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    segments: list[int],
    scaling: float | None,
) -> Tensor:
    """One ``varlen_attn`` call over a packed pass: query [1, Hq, T, D], key/value
    [1, Hkv, T, D] → [1, T, Hq, D], causal within each conversation.

    The keyword set of ``varlen_attn`` changed between torch releases (``is_causal`` in
    2.10, ``window_size=(-1, 0)`` later; ``scale`` and ``enable_gqa`` added later), so
    what the installed kernel lacks is done here: grouped key/value heads are repeated
    for each query head, and a scale other than ``D^-1/2`` is folded into the query.
    """
    kernel = varlen_kernel()
    assert kernel is not None
    params = _keywords(kernel)
    q = query[0].transpose(0, 1).contiguous()  # [T, Hq, D]
    k = key[0].transpose(0, 1).contiguous()  # [T, Hkv, D]
    v = value[0].transpose(0, 1).contiguous()
    kw: dict[str, Any] = {}
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    default_scale = q.shape[-1] ** -0.5
    if scaling is not None and abs(scaling - default_scale) > 1e-12 * default_scale:
        if "scale" in params:
            kw["scale"] = scaling
        else:
            q = q * (scaling / default_scale)
    if "is_causal" in params:
        kw["is_causal"] = True
    else:
        kw["window_size"] = (-1, 0)
    cu = _cu_seqlens(segments, q.device)
    longest = max(b - a for a, b in zip(segments[:-1], segments[1:], strict=True))
    out = kernel(q, k, v, cu, cu, longest, longest, **kw)
    return out[None]


FLASH_HEAD_DIM_LIMIT = 256
"""The largest head dimension flash-attention 2's kernels take (DATA-AND-TRAINING-RULES.md
§2 rule 16; a limit of the flash-attn kernels, not of PyTorch)."""


def flash_attention_refusal(model: nn.Module, device: torch.device) -> str | None:
    """Why ``attn_implementation: flash_attention_2`` cannot train ``model`` here, or None:
    a head dimension above :data:`FLASH_HEAD_DIM_LIMIT` (Gemma 4's global layers have 512:
    rule 16), a device other than CUDA, or no ``flash_attn`` package on the worker.
    ``model`` may be the ``meta``-device tree (engine/targets.py ``meta_model``), so this is
    decided before any weight loads."""
    import importlib.util

    field = "config.model.attentionImplementation flash_attention_2"
    over = [d for d in head_dims(model) if d > FLASH_HEAD_DIM_LIMIT]
    if over:
        return (
            f"{field} takes head dimensions up to {FLASH_HEAD_DIM_LIMIT} (the flash-attn "
            f"kernels' limit); this model has attention layers of head dimension {over[-1]}. "
            "Use sdpa (or flex_attention for Gemma 4 on several devices)."
        )
    on_device = flash_attention_device_refusal(device.type)
    if on_device:
        return on_device
    if importlib.util.find_spec("flash_attn") is None:
        return f"{field} needs the flash-attn package on the worker, which lacks it. Use sdpa."
    return None


def flash_attention_device_refusal(device_type: str) -> str | None:
    """Why ``attn_implementation: flash_attention_2`` cannot train on a device of type
    ``device_type`` (``"cpu"``, ``"cuda"``), or None: the flash-attn kernels run on CUDA
    only. Admission asks this before a run is recorded (jobs/admission.py, issue 47), the
    session again when it loads (:func:`flash_attention_refusal`)."""
    if device_type != "cuda":
        return (
            "config.model.attentionImplementation flash_attention_2 runs on CUDA only; "
            f"this run trains on {device_type}. Use sdpa."
        )
    return None


def head_dims(model: nn.Module) -> list[int]:
    """The head dimensions of a model's attention layers (Gemma 4: ``head_dim`` of the
    sliding layers and ``global_head_dim`` of the full ones), sorted. Read from the layers
    (``head_dim`` beside a ``q_proj``), as Gemma 4's config answers per layer."""
    return sorted(
        {
            int(m.head_dim)
            for m in model.modules()
            if isinstance(getattr(m, "head_dim", None), int) and hasattr(m, "q_proj")
        }
    )
