"""Where and in what precision a training session runs: its device and its compute and
weight dtypes, from the engine settings."""

from __future__ import annotations

import torch

from .config import EngineConfig
from .errors import EngineError


def pick_device(cfg: EngineConfig) -> torch.device:
    """``cuda`` when asked or (auto) available, else ``cpu``.

    Raises:
        EngineError: ``device="cuda"`` on a machine without one.
    """
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise EngineError(
            "execution.device is cuda but no CUDA device is visible.", field="execution.device"
        )
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def pick_dtype(cfg: EngineConfig, device: torch.device) -> torch.dtype:
    """The compute dtype: bf16 on CUDA and fp32 on CPU unless ``precision`` names one."""
    if cfg.precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return torch.bfloat16 if cfg.precision == "bf16" else torch.float32


def pick_weight_dtype(cfg: EngineConfig, device: torch.device) -> torch.dtype:
    """The storage dtype of the frozen base weights: the compute dtype.

    bf16 compute keeps the frozen base in bf16, so no pass casts it (issue 24: under
    autocast, fp32 frozen weights were cast on every pass, which held the CPU bf16 step at
    a third of the bf16 matmul rate); fp32 compute keeps it in fp32.
    """
    return pick_dtype(cfg, device)


def pick_adapter_dtype(cfg: EngineConfig, device: torch.device) -> torch.dtype:
    """The dtype of the LoRA adapter and its AdamW state: ``config.model.weightPrecision``
    (seeds/001, "the precision of the trained model's weights"); auto is fp32, the usual
    mixed-precision rule of full-precision trained weights over a low-precision base."""
    del device  # the same rule on every device
    return torch.bfloat16 if cfg.weight_precision == "bf16" else torch.float32
