"""Saving and restoring a :class:`~akka_optimize.engine.session.training.TrainingSession`: its
adapter in PEFT format, a warm start from another adapter's weights, and the full training
state (adapter tensors, AdamW moments, schedule position, RNG states, the data cursor) that
a resume continues from exactly. Every folder appears atomically (:class:`_atomic_dir`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..config import EngineConfig
from ..errors import EngineError


class StateMixin:
    """The saving and loading of :class:`~akka_optimize.engine.session.training.TrainingSession`
    (which sets the attributes annotated here and provides ``_reset``)."""

    cfg: EngineConfig
    model: Any
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    step: int
    total_updates: int | None
    schedule_start: int
    world: int
    sharded: bool
    is_main: bool
    _reset: Callable[[], None]
    _full_adapter: Callable[[], dict[str, torch.Tensor]]
    _full_optimizer: Callable[[], dict[str, Any]]
    _check_replicas: Callable[[dict[str, Any]], None]
    _set_param: Callable[[torch.Tensor, torch.Tensor], None]
    _place_optimizer: Callable[[dict[str, Any]], dict[str, Any]]

    def save_adapter(self, directory: Path) -> Path:
        """Write the adapter in PEFT format (adapter_config.json + adapter_model.safetensors).

        On several ranks every rank gathers the whole adapter and rank 0 writes it."""
        directory = Path(directory)
        extra = {"state_dict": self._full_adapter()} if self.world > 1 else {}
        if not self.is_main:
            return directory
        with _atomic_dir(directory) as tmp:
            # The base embedding is frozen: never copy it into the adapter (PEFT does for
            # a targeted lm_head tied to it unless told not to).
            self.model.save_pretrained(
                tmp, safe_serialization=True, save_embedding_layers=False, **extra
            )
        return directory

    def load_adapter_weights(self, directory: Path) -> None:
        """Start from a trained PEFT adapter's weights (``warmStartModelId``; the optimizer
        and step stay fresh).

        Args:
            directory: a PEFT adapter folder (``adapter_config.json`` and
                ``adapter_model.safetensors``) trained on this base model.

        Raises:
            EngineError: its rank or alpha differs from this run's
                (``config.hyperparams.lora``), or its tensors do not match this adapter's
                (counts of missing and unexpected tensors).
        """
        from peft import set_peft_model_state_dict

        directory = Path(directory)
        conf = json.loads((directory / "adapter_config.json").read_text())
        for key, mine, path in (
            ("r", self.cfg.lora_rank, "rank"),
            ("lora_alpha", self.cfg.lora_alpha, "alpha"),
        ):
            if float(conf.get(key, mine)) != float(mine):
                raise EngineError(
                    f"the warm-start adapter has {path} {conf.get(key)} but this run trains "
                    f"{path} {mine}; set config.hyperparams.lora.{path} to {conf.get(key)}.",
                    field=f"config.hyperparams.lora.{path}",
                )
        weights = load_file(directory / "adapter_model.safetensors")
        if self.sharded:  # FSDP2 shards: each tensor into this rank's shard
            self._load_sharded_adapter(weights)
            self._reset()
            return
        try:
            res = set_peft_model_state_dict(self.model, weights)
        except RuntimeError as exc:  # shapes that do not fit
            raise EngineError(f"the warm-start adapter does not fit this model: {exc}") from exc
        missing = [k for k in res.missing_keys if "lora_" in k]
        _refuse_mismatch(len(weights), len(self.params), missing, res.unexpected_keys)
        self._reset()

    def _load_sharded_adapter(self, weights: dict[str, torch.Tensor]) -> None:
        """A PEFT adapter's tensors (saved without the adapter name ``default``) into the
        sharded adapter. Raises EngineError as :meth:`load_adapter_weights` does."""
        by_key = {n.replace(".default.", "."): n for n in self.params}
        missing = [k for k in by_key if k not in weights]
        _refuse_mismatch(
            len(weights), len(self.params), missing, sorted(set(weights) - set(by_key))
        )
        for key, name in by_key.items():
            if tuple(weights[key].shape) != tuple(self.params[name].shape):
                raise EngineError(
                    f"the warm-start adapter does not fit this model: {key} has shape "
                    f"{tuple(weights[key].shape)}, this adapter {tuple(self.params[name].shape)}.",
                    field="warmStartModelId",
                )
            self._set_param(self.params[name], weights[key])

    def save_state(self, directory: Path, cursor: dict[str, Any] | None = None) -> Path:
        """Write everything needed to continue exactly: adapter tensors (exact dtype),
        AdamW moments, schedule position, RNG states (python, torch, CUDA), the data
        ``cursor`` and the step. The folder appears atomically.
        """
        directory = Path(directory)
        adapter, optimizer = self._full_adapter(), self._full_optimizer()
        self._check_replicas(optimizer)
        if not self.is_main:  # rank 0 writes the whole state, in the one-device format
            return directory
        with _atomic_dir(directory) as tmp:
            save_file(adapter, tmp / "adapter_state.safetensors")
            torch.save(optimizer, tmp / "optimizer.pt")
            rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
            if torch.cuda.is_available():
                rng["cuda"] = torch.cuda.get_rng_state_all()
            torch.save(rng, tmp / "rng.pt")
            meta = {
                "step": self.step,
                "total_updates": self.total_updates,
                "schedule_start": self.schedule_start,
                "scheduler": {"kind": self.cfg.scheduler, "next_update": self.step + 1},
                "cursor": cursor or {},
                "config": self.cfg.to_dict(),
            }
            (tmp / "state.json").write_text(json.dumps(meta, indent=1))
        return directory

    def load_state(self, directory: Path) -> dict[str, Any]:
        """Restore a :meth:`save_state` folder; returns its ``state.json`` (step, cursor, …).

        Raises:
            EngineError: the folder is missing or does not match this adapter.
        """
        directory = Path(directory)
        if not (directory / "state.json").exists():
            raise EngineError(f"no training state at {directory}.", code="state_missing")
        tensors = load_file(directory / "adapter_state.safetensors")
        if set(tensors) != set(self.params):
            raise EngineError(
                f"training state at {directory} holds {len(tensors)} adapter tensors but this "
                f"adapter has {len(self.params)}; resume with the run's own settings."
            )
        for n, p in self.params.items():
            self._set_param(p, tensors[n])
        saved = torch.load(directory / "optimizer.pt", weights_only=False)
        self.optimizer.load_state_dict(self._place_optimizer(saved))
        for group in self.optimizer.param_groups:  # this run's settings, not the saved ones
            group["weight_decay"] = self.cfg.weight_decay
            group["betas"] = (self.cfg.adam_beta1, self.cfg.adam_beta2)
            group["eps"] = self.cfg.adam_epsilon
        rng = torch.load(directory / "rng.pt", weights_only=False)
        random.setstate(rng["python"])
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        meta = json.loads((directory / "state.json").read_text())
        self.step = int(meta["step"])
        self.schedule_start = int(meta.get("schedule_start") or 0)
        self._reset()
        return meta


def _refuse_mismatch(held: int, mine: int, missing: list[str], unexpected: list[str]) -> None:
    """Refuse a warm-start adapter whose tensors are not this adapter's.

    Raises:
        EngineError: counts of missing and unexpected tensors, with one example."""
    if missing or unexpected:
        raise EngineError(
            f"the warm-start adapter holds {held} tensors: {len(missing)} of this adapter's "
            f"{mine} are missing and {len(unexpected)} are not this model's "
            f"(e.g. {(missing or unexpected)[0]}).",
            field="warmStartModelId",
        )


class _atomic_dir:
    """Write into a sibling temporary folder, then rename it to ``dest``."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest

    def __enter__(self) -> Path:
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.", dir=self.dest.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.dest.exists():
                shutil.rmtree(self.dest)
            os.replace(self.tmp, self.dest)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
