"""Flex attention over packed passes: one document mask per pass (seeds/001 "Flex attention
for Gemma 4", "Packed passes keep conversations apart").

A run with ``config.model.attentionImplementation: flex_attention`` (Gemma 4 E2B, E4B or
12B on several devices; plan/rules/engine.py decides who may ask) trains with the
attention implementation this module registers, ``akka_flex``. Each pass carries its
sequence boundaries (``akka_segments``, the ``cu_seqlens`` of
:class:`akka_optimize.data.types.Pass`, padding included: ``engine.pad_to_length`` adds one
more sequence of weight 0, engine/sft_order.py), and every layer of the pass attends
through the same mask: causal, within one conversation, and within the layer's sliding
window where it has one; a soft-capped layer applies its cap as the score modification.

- On CUDA the mask is a ``BlockMask`` and the kernel is ``torch.compile(flex_attention)``
  (one fused kernel per padded pass size). The kernels need shared memory that grows with
  the head dimension (Gemma 4's global layers: 512), so :func:`check_device` runs one
  forward and backward at each head dimension before the first update and fails the run
  there, naming the device, where the kernel cannot run.
- On CPU, torch's ``flex_attention`` computes the forward only (torch 2.13 raises for a
  CPU backward), unfused. Passes without gradients (validation, the checks before the
  first update) use it; a training pass evaluates the same mask to a dense boolean matrix
  and attends through ``scaled_dot_product_attention``, so CPU ranks (gloo, how CI tests
  several devices) train exactly the masking the GPU kernel trains.

Anything else (a batch of several rows, a KV cache, attention dropout, sinks) is
transformers' own ``sdpa`` with transformers' own mask, as for ``akka_packed``
(engine/attention.py).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .attention import SEGMENTS_KWARG, one_packed_pass, register_with_transformers
from .errors import EngineError

FLEX_ATTENTION = "akka_flex"
"""The ``attn_implementation`` name this module registers."""
PROBE_TOKENS = 256
"""Tokens of the start-up probe pass (two kernel blocks of 128)."""

_compiled: Any = None
_masks: dict[tuple[Any, ...], Any] = {}
"""The current pass's masks by (segments, window, device, dense); a new pass clears it,
so every layer of one pass builds each mask once."""


def register() -> str:
    """Register ``akka_flex`` with transformers (idempotent) and return its name."""
    return register_with_transformers(FLEX_ATTENTION, flex_attention_forward)


def document_mask_mod(segments: Sequence[int], window: int | None, device: Any) -> Callable:
    """The flex ``mask_mod`` of a packed pass: query ``q`` sees key ``k`` when ``k <= q``,
    both lie in the same sequence of ``segments`` (``cu_seqlens``: ``[0, L1, L1+L2, …, T]``)
    and, with a sliding ``window``, ``q - k < window`` (transformers' sliding-window rule).
    """
    lengths = torch.tensor([b - a for a, b in zip(segments[:-1], segments[1:], strict=True)])
    doc = torch.repeat_interleave(torch.arange(len(lengths)), lengths).to(device)

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        keep = (k <= q) & (doc[q] == doc[k])
        return keep & (q - k < window) if window else keep

    return mask_mod


@functools.lru_cache(maxsize=8)
def _cap(softcap: float | None) -> Callable | None:
    """The ``score_mod`` of a soft cap (one function per cap value, reused by every layer
    and pass), or None without one."""
    if not softcap:
        return None

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        return softcap * torch.tanh(score / softcap)

    return score_mod


def _mask(segments: Sequence[int], window: int | None, device: torch.device, dense: bool) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask, create_mask

    key = (tuple(segments), window, str(device), dense)
    if key not in _masks:
        if not any(k[0] == key[0] for k in _masks):
            _masks.clear()  # a new pass
        t = segments[-1]
        mod = document_mask_mod(segments, window, device)
        if dense:
            _masks[key] = create_mask(mod, None, None, t, t, device=device)
        else:
            _masks[key] = _call(
                create_block_mask,
                mod,
                None,
                None,
                t,
                t,
                device=device,
                _compile=device.type == "cuda",
            )
    return _masks[key]


COMPILED_ON = ("cuda",)
"""Device types whose flex kernel is compiled (tests add ``cpu`` with the eager backend)."""
COMPILE_BACKEND = "inductor"


@dataclass(frozen=True)
class CompileLimits:
    """The ``compile.*`` engine settings (seeds/001 "Set the training engine's settings
    directly"), applied to Torch's compiler when the flex kernel is compiled: a new pass
    shape compiles again, once static and then dynamic, so a run reaches a limit only when
    set low; past it Torch runs the kernel uncompiled, or the run fails when told to."""

    recompile_limit: int = 8
    accumulated_recompile_limit: int = 256
    fail: bool = False

    def apply(self) -> None:
        """Set ``torch._dynamo.config``'s limits for this process (the worker's)."""
        import torch._dynamo

        torch._dynamo.config.recompile_limit = self.recompile_limit
        torch._dynamo.config.accumulated_recompile_limit = self.accumulated_recompile_limit
        torch._dynamo.config.fail_on_recompile_limit_hit = self.fail

    def refusal(self, cause: BaseException | None = None) -> str:
        """The sentence of a run that reached a limit with ``fail`` set: the limit Torch
        names in ``cause`` (its "Limit type: …"), else the lower one."""
        named = str(cause or "")
        if "accumulated_recompile_limit" in named or (
            "Limit type: recompile_limit" not in named
            and self.accumulated_recompile_limit <= self.recompile_limit
        ):
            key, limit = "compile.accumulated_recompile_limit", self.accumulated_recompile_limit
        else:
            key, limit = "compile.recompile_limit", self.recompile_limit
        return (
            f"config.engineSettings.{key} {limit} reached: the flex attention kernel (or its "
            "block mask) would compile again for a new pass shape, and "
            "compile.fail_on_recompile_limit is true. "
            "Raise the limit, or set fail_on_recompile_limit to false to run uncompiled past it."
        )


limits = CompileLimits()
"""The limits of this process's run (set by :func:`use_limits`)."""


def use_limits(new: CompileLimits) -> None:
    """Take ``new`` as this process's compile limits (a training session's settings)."""
    global limits
    limits = new
    new.apply()


def _kernel(device: torch.device) -> Callable:
    """``flex_attention``: compiled on CUDA (fused kernels), eager elsewhere."""
    global _compiled
    from torch.nn.attention.flex_attention import flex_attention

    if device.type not in COMPILED_ON:
        return flex_attention
    if _compiled is None:
        _compiled = torch.compile(flex_attention, backend=COMPILE_BACKEND)
    return _compiled


def _call(kernel: Callable, *args: Any, **kwargs: Any) -> Tensor:
    """``kernel(*args, **kwargs)``, a compile limit reached with ``fail`` set raised as
    :class:`EngineError` on the setting."""
    from torch._dynamo.exc import FailOnRecompileLimitHit

    try:
        return kernel(*args, **kwargs)
    except FailOnRecompileLimitHit as exc:
        sentence = limits.refusal(exc.__cause__)
        raise EngineError(sentence, field=sentence.split(" ", 1)[0]) from exc


def flex_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """The ``akka_flex`` entry of transformers' attention interface, called per layer with
    query [B, Hq, T, D] and key/value [B, Hkv, T, D] (grouped heads), ``sliding_window`` and
    ``softcap`` as the layer has them, and the pass's ``akka_segments``.

    Returns:
        (attention output [B, T, Hq, D] in the query's dtype, ``None``).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop(SEGMENTS_KWARG, None)
    if not one_packed_pass(module, query, key, segments, kwargs) or (dropout and module.training):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    window, softcap = kwargs.get("sliding_window"), kwargs.get("softcap")
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if query.device.type == "cpu" and grads:
        mask = _mask(segments, window, query.device, dense=True)[0, 0]
        out = _dense(query, key, value, mask, scaling, softcap)
    else:
        block = _mask(segments, window, query.device, dense=False)
        with warnings.catch_warnings():  # eager on CPU by choice (module docstring)
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            out = _call(
                _kernel(query.device),
                query,
                key,
                value,
                score_mod=_cap(softcap),
                block_mask=block,
                scale=scaling,
                enable_gqa=query.shape[1] != key.shape[1],
            )
    return out.transpose(1, 2).contiguous(), None


def _dense(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor,
    scaling: float | None,
    softcap: float | None,
) -> Tensor:
    """The flex computation with a dense boolean ``mask`` [T, T] (True: attend), for a
    training pass on CPU: query [1, Hq, T, D], key/value [1, Hkv, T, D] → [1, Hq, T, D]."""
    groups = query.shape[1] // key.shape[1]
    if not softcap:
        return nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scaling, enable_gqa=groups > 1
        )
    k = key.repeat_interleave(groups, dim=1)
    v = value.repeat_interleave(groups, dim=1)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, k.transpose(-1, -2)) * scale
    scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores.float(), dim=-1).to(v.dtype), v)


def check_device(device: torch.device, dims: Sequence[int], dtype: torch.dtype) -> None:
    """Run the flex kernel forward and backward once per head dimension in ``dims`` on a
    pass of :data:`PROBE_TOKENS` tokens (two conversations) before the first update.

    A CUDA device whose shared memory per block cannot hold the kernel's tiles fails here
    (seeds/001: "On a GPU without it, the run fails at startup and the error names the
    device"). Nothing runs on CPU, whose flex path has no such limit. Afterwards Torch's
    compiled code is dropped, so the probe's compilations count against no compile limit.

    Raises:
        EngineError: on field ``config.model.attentionImplementation``, naming the device,
            its shared memory per block, the head dimension and the kernel's own error.
    """
    if device.type != "cuda":
        return
    half = PROBE_TOKENS // 2
    segments = [0, half, PROBE_TOKENS]
    for dim in dims:
        try:
            q = torch.randn(1, 2, PROBE_TOKENS, dim, device=device, dtype=dtype)
            q.requires_grad_(True)
            out = _kernel(device)(
                q, q.detach(), q.detach(), block_mask=_mask(segments, None, device, False)
            )
            out.sum().backward()
            torch.cuda.synchronize(device)
        except Exception as exc:  # the kernel's own error goes into the sentence
            raise EngineError(flex_device_refusal(device, dim, exc), field=_FIELD) from exc
        finally:
            _masks.clear()
    _forget_compiled()  # the probe's compilations do not count against the run's limits


def _forget_compiled() -> None:
    global _compiled
    import torch._dynamo

    torch._dynamo.reset()
    _compiled = None


_FIELD = "config.model.attentionImplementation"


def flex_device_refusal(device: torch.device, dim: int, exc: BaseException) -> str:
    """The sentence a run fails with when flex attention cannot run on ``device``."""
    props = torch.cuda.get_device_properties(device)
    shared = getattr(props, "shared_memory_per_block_optin", None)
    memory = f"{shared // 1024} KiB of shared memory per block" if shared else "its shared memory"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return (
        f"{_FIELD} flex_attention cannot run on {props.name} ({device}, {memory}) at head "
        f"dimension {dim}: {first}. Use sdpa, or a GPU with more shared memory per block."
    )
