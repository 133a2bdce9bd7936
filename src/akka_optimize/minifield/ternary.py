"""The ``ternary-g128-v1`` quantization profile: ternary body weights with group-128 scales.

Eligible weights: the weight of every ``nn.Linear`` inside the model body (attention and
MLP projections of the decoder layers) whose element count is a multiple of 128. The
embedding, the (tied) LM head, norms and biases are not eligible.

A weight ``W`` is flattened row-major and cut into groups of 128 consecutive elements.
Group ``g`` gets a scale ``s_g`` and each element a code ``c ∈ {−1, 0, +1}``::

    absmean-v1 (the profile's rule):  s_g = mean(|W_g|)
    absmax-v1:                        s_g = max(|W_g|)
    s_g is clamped to ≥ 2⁻¹⁴ and rounded to FP16 (the export stores FP16 scales)
    c   = clamp(round(W / s_g), −1, +1)   (round half to even)
    Ŵ   = c · s_g

The QAT forward uses ``Ŵ`` with a straight-through estimator (``W + (Ŵ − W).detach()``):
the gradient of ``Ŵ`` lands unchanged on the FP32 master weight ``W``.

Packed codes (the ``minifield.ternary.v1`` export): 2 bits per weight, 4 weights per byte,
element ``i`` in bits ``2·(i mod 4)`` … ``2·(i mod 4)+1`` of byte ``i // 4``; bit patterns
``00`` = 0, ``01`` = +1, ``10`` = −1 (``11`` is invalid).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

GROUP = 128
PROFILE = "ternary-g128-v1"
PROFILE_RULE = "absmean-v1"
RULES = ("absmean-v1", "absmax-v1")
MIN_SCALE = 2.0**-14
"""Smallest scale: the smallest normal FP16 number, so no scale is 0 or subnormal."""


def resolve_rule(rule: str | None) -> str:
    """The scale rule in force: ``rule``, or the profile's (``absmean-v1``) when null."""
    return PROFILE_RULE if rule is None else rule


def group_scales(w: Tensor, rule: str) -> Tensor:
    """One FP16-representable scale per group of 128: float32 tensor [numel / 128].

    Raises:
        ValueError: ``w.numel()`` is not a multiple of 128, or an unknown rule.
    """
    if w.numel() % GROUP:
        raise ValueError(f"a weight of {w.numel()} elements is not a whole number of groups")
    g = w.detach().float().reshape(-1, GROUP).abs()
    if rule == "absmean-v1":
        s = g.mean(dim=1)
    elif rule == "absmax-v1":
        s = g.amax(dim=1)
    else:
        raise ValueError(f"unknown scale rule {rule!r}; known: {', '.join(RULES)}")
    return s.clamp_min(MIN_SCALE).half().float()


def quantize(w: Tensor, rule: str) -> tuple[Tensor, Tensor]:
    """(codes int8 [numel] in {−1, 0, 1}, scales float32 [numel / 128]) of ``w``."""
    s = group_scales(w, rule)
    c = torch.round(w.detach().float().reshape(-1, GROUP) / s[:, None]).clamp(-1, 1)
    return c.reshape(-1).to(torch.int8), s


def dequantize(codes: Tensor, scales: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``c · s`` as a float32 tensor of ``shape``."""
    return (codes.float().reshape(-1, GROUP) * scales.float()[:, None]).reshape(shape)


def ternary(w: Tensor, rule: str) -> Tensor:
    """``Ŵ`` with a straight-through gradient to ``w`` (same shape and dtype as ``w``)."""
    codes, scales = quantize(w, rule)
    q = dequantize(codes, scales, tuple(w.shape)).to(w.dtype)
    return w + (q - w).detach()


class TernaryLinear(nn.Module):
    """An ``nn.Linear`` whose forward uses the ternary weight (straight-through).

    It holds the original module's ``weight`` and ``bias`` parameters under the same
    names, so the model's state dict keys are unchanged and the optimizer updates the FP32
    master weight.
    """

    def __init__(self, linear: nn.Linear, rule: str) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.rule = rule

    def forward(self, x: Tensor) -> Tensor:
        """``x @ Ŵᵀ + b``."""
        return F.linear(x, ternary(self.weight, self.rule), self.bias)


def eligible_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """``(qualified name, module)`` of every eligible linear of the body, in model order."""
    body = getattr(model, "model", model)
    prefix = "model." if body is not model else ""
    return [
        (prefix + name, m)
        for name, m in body.named_modules()
        if isinstance(m, nn.Linear | TernaryLinear) and m.weight.numel() % GROUP == 0
    ]


def make_ternary(model: nn.Module, rule: str) -> list[str]:
    """Swap every eligible body linear for a :class:`TernaryLinear` (in place).

    Returns:
        The ``.weight`` names now quantized, in model order.
    """
    names = []
    for name, lin in eligible_linears(model):
        if isinstance(lin, TernaryLinear):
            names.append(name + ".weight")
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, TernaryLinear(lin, rule))
        names.append(name + ".weight")
    return names


def pack_codes(codes: Tensor) -> bytes:
    """Codes in {−1, 0, 1} → 2-bit packed bytes (module docstring); ``len = numel / 4``."""
    c = codes.cpu().to(torch.int8).numpy().astype(np.int16)
    bits = np.where(c == 1, 1, np.where(c == -1, 2, 0)).astype(np.uint8).reshape(-1, 4)
    packed = bits[:, 0] | (bits[:, 1] << 2) | (bits[:, 2] << 4) | (bits[:, 3] << 6)
    return packed.astype(np.uint8).tobytes()


def unpack_codes(data: bytes, n: int) -> Tensor:
    """2-bit packed bytes → int8 codes [n].

    Raises:
        ValueError: the byte count is not ``n / 4`` or a code has the invalid pattern 11.
    """
    if len(data) * 4 != n:
        raise ValueError(f"{len(data)} bytes of codes cannot hold {n} weights")
    b = np.frombuffer(data, dtype=np.uint8)
    bits = np.stack([(b >> (2 * k)) & 3 for k in range(4)], axis=1).reshape(-1)
    if (bits == 3).any():
        raise ValueError("a ternary code has the invalid bit pattern 11")
    codes = np.where(bits == 1, 1, np.where(bits == 2, -1, 0)).astype(np.int8)
    return torch.from_numpy(codes)


def describe(rule: str) -> dict[str, Any]:
    """The quantization settings an export and a checkpoint keep."""
    return {"profile": PROFILE, "group_size": GROUP, "scale_rule": rule, "scale_dtype": "float16"}
