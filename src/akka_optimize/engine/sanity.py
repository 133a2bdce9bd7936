"""First-loss sanity (DATA-AND-TRAINING-RULES.md §2 rule 10, "Expected initial loss").

A pretrained model doing supervised fine-tuning starts at a loss of about 0.5–2.0 per
token; above 3.0 is wrong, and near log(vocabulary) (≈12 for a 262K vocabulary) is
random prediction. The check only warns: it never changes the loss or stops the run.
"""

from __future__ import annotations

import math
from typing import Any

HIGH_FIRST_LOSS = 3.0
"""A first loss above this (nats per supervised token) is not what a pretrained model gives."""
NEAR_UNIFORM = 0.75
"""A first loss at or above this fraction of log(vocabulary) is called near random prediction."""
LIKELY_CAUSES = (
    "the loss mask supervises tokens it should not (check `training data preview`)",
    "the base weights are random, truncated or wrongly converted (a tiny test model "
    "starts near log(vocabulary) by design)",
    "LoRA targets outside the language model (a vision or audio tower), see the run's "
    "adaptedModules",
)


def first_loss_warning(loss: float, vocab_size: int, step: int = 1) -> dict[str, Any] | None:
    """The ``warning`` event for a fresh run's first update, or None when its loss is sane.

    Args:
        loss: the first update's loss, nats per supervised token.
        vocab_size: rows of the output head (log of it is the loss of uniform guessing).

    Returns:
        ``{"type": "warning", "code": "first_loss_high", "step", "loss", "logVocab",
        "message", "likelyCauses"}``, or None at or below 3.0.
    """
    log_v = math.log(vocab_size) if vocab_size > 1 else 0.0
    near = log_v > 0 and loss >= NEAR_UNIFORM * log_v
    if loss <= HIGH_FIRST_LOSS and not near:
        return None
    what = (
        f"near log(vocabulary) = {log_v:.2f}, the loss of random prediction"
        if near
        else f"above {HIGH_FIRST_LOSS}, where a pretrained model starts at about 0.5–2.0"
    )
    return {
        "type": "warning",
        "code": "first_loss_high",
        "step": step,
        "loss": loss,
        "logVocab": log_v,
        "message": f"The first update's loss is {loss:.3f}, {what}. Likely causes: "
        + "; ".join(LIKELY_CAUSES)
        + ". The loss is reported as measured.",
        "likelyCauses": list(LIKELY_CAUSES),
    }


BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""CPU flags of bf16 matrix instructions (x86 AVX512-BF16 and AMX; Arm's ``bf16``)."""


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags (the ``flags`` line on x86, ``Features`` on Arm) from
    ``path``, or None where it cannot be read (not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def slow_bf16_warning(
    device_type: str, dtype: Any, flags: frozenset[str] | None
) -> dict[str, Any] | None:
    """The ``warning`` event of a run computing in bf16 on a CPU without bf16 matrix
    instructions, or None. There bf16 products are emulated and slower than fp32 (measured
    on a 2-core AMD EPYC with AVX2 only: about 17 GFLOP/s bf16 at every size, several times
    under fp32), so the run says so at its start. It only warns.

    Args:
        device_type: the session's device type (``cpu``, ``cuda``).
        dtype: the compute dtype (``torch.bfloat16`` or ``torch.float32``).
        flags: :func:`cpu_flags` (None: unknown, no warning).

    Returns:
        ``{"type": "warning", "code": "bf16_without_cpu_support", "step": 0, "message"}``.
    """
    import torch

    if device_type != "cpu" or dtype != torch.bfloat16 or flags is None:
        return None
    if flags & BF16_CPU_FLAGS:
        return None
    return {
        "type": "warning",
        "code": "bf16_without_cpu_support",
        "step": 0,
        "message": "The run computes in bf16 on a CPU without bf16 matrix instructions "
        "(no avx512_bf16, amx_bf16 or Arm bf16 flag): bf16 is emulated there and slower than fp32. "
        "Set config.model.precision to fp32 on this machine for speed; the run goes on.",
    }


def start_warnings(device_type: str, dtype: Any) -> list[dict[str, Any]]:
    """The warnings a run emits when its session has loaded (:func:`slow_bf16_warning`)."""
    slow = slow_bf16_warning(device_type, dtype, cpu_flags())
    return [slow] if slow is not None else []
