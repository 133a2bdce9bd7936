"""Liger's fused RMSNorm and GeGLU kernels for Gemma 4 (seeds/001 "Set the training
engine's settings directly": ``kernels.liger.rms_norm`` and ``kernels.liger.geglu``).

The plan allows them for Gemma 4 E2B and E4B only (plan/rules/engine.py), and a run on
several devices only on CUDA (jobs/multi_device.py): Liger's kernels are Triton kernels.
:func:`apply_liger` patches the loaded model in place with ``liger-kernel``'s own Gemma 4
functions (``apply_liger_kernel_to_gemma4`` for the multimodal class the catalog loads,
``apply_liger_kernel_to_gemma4_text`` for a text-only one), before the LoRA adapter wraps
the projections: each RMSNorm with a weight computes through ``LigerRMSNorm`` (fp32, as
transformers' Gemma 4 norm), each MLP through ``LigerGELUMulFunction`` (tanh GELU of the
gate times the up projection, one kernel). Rotary embeddings and the loss stay the
engine's own (the head is chunked: engine/head.py). ``pip install 'akka-optimize[gpu]'``
installs the pinned ``liger-kernel`` on a GPU worker.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from .errors import EngineError

FIELDS = {
    "rms_norm": "config.engineSettings.kernels.liger.rms_norm",
    "geglu": "config.engineSettings.kernels.liger.geglu",
}


def liger_refusal(model: Any, device: torch.device, rms_norm: bool, geglu: bool) -> str | None:
    """Why the asked Liger kernels cannot patch ``model`` on ``device``, or None: not CUDA,
    no ``liger_kernel`` package on the worker, or a model other than Gemma 4."""
    field = FIELDS["rms_norm"] if rms_norm else FIELDS["geglu"]
    if device.type != "cuda":
        return f"{field}: Liger's kernels run on CUDA only; this run trains on {device.type}."
    if importlib.util.find_spec("liger_kernel") is None:
        return (
            f"{field}: the liger-kernel package is not installed on the worker; install "
            "akka-optimize[gpu] there, or set it to false."
        )
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in ("gemma4", "gemma4_text"):
        return f"{field}: Liger's kernels are verified for Gemma 4 only, not {model_type}."
    return None


def apply_liger(model: Any, device: torch.device, rms_norm: bool, geglu: bool) -> None:
    """Patch ``model`` (a loaded Gemma 4, before PEFT wraps it) with the asked kernels.

    Raises:
        EngineError: on the asked setting, with :func:`liger_refusal`'s sentence.
    """
    if not (rms_norm or geglu):
        return
    refused = liger_refusal(model, device, rms_norm, geglu)
    if refused:
        raise EngineError(refused, field=refused.split(":", 1)[0])
    from liger_kernel.transformers import (
        apply_liger_kernel_to_gemma4,
        apply_liger_kernel_to_gemma4_text,
    )

    kw = dict(rope=False, cross_entropy=False, fused_linear_cross_entropy=False)
    if model.config.model_type == "gemma4":  # Gemma4ForConditionalGeneration
        apply_liger_kernel_to_gemma4(rms_norm=rms_norm, geglu=geglu, model=model, **kw)
    else:
        apply_liger_kernel_to_gemma4_text(rms_norm=rms_norm, geglu=geglu, model=model, **kw)
