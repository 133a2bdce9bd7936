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
    """The storage dtype of the frozen base weights (``weightPrecision``; auto: the compute
    dtype on CUDA, fp32 on CPU)."""
    if cfg.weight_precision == "auto":
        return pick_dtype(cfg, device) if device.type == "cuda" else torch.float32
    return torch.bfloat16 if cfg.weight_precision == "bf16" else torch.float32
