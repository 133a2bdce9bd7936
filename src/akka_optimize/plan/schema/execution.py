"""The ``execution`` record of a run plan: where and how the run executes, with its
``memory`` (and ``offload``) and ``rollout`` groups.

Source: seeds/000 "H100 support" (``deviceProfile``, ``hostMemoryGiB``); seeds/001
"Choose a run's memory settings", "Resume from one of several saves", "Keep an adapter
for each epoch".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Group


class OffloadGroup(Group):
    """``execution.memory.offload``: what moves to host memory."""

    weights: bool | None = Field(
        None,
        description="Move the weights (each device's shards) to host memory between passes. "
        "Set together with `optimizer`: FSDP2 offloads both or neither.",
    )
    optimizer: bool | None = Field(
        None,
        description="Keep optimizer state in host memory between updates. Set together "
        "with `weights`.",
    )
    activations: bool | None = Field(
        None, description="Store activations in host memory until the backward pass."
    )


class MemoryGroup(Group):
    """``execution.memory``: memory settings (seeds/001 "Choose a run's memory settings")."""

    offload: OffloadGroup | None = Field(None, description="Host-memory offload.")
    sharding: Literal["full", "none"] | None = Field(
        None,
        description="`full` shards training state across devices; `none` keeps a complete "
        "copy of the model on each device and saves one copy of training state.",
    )


class RolloutGroup(Group):
    """``execution.rollout``: the reinforcement run's rollout engine."""

    memoryShare: float | None = Field(
        None, gt=0, lt=1, description="Share of each device the rollout engine takes."
    )


class ExecutionGroup(Group):
    """``execution``: where and how the run executes."""

    gpus: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Devices the run claims on one node (the CPU counts as one device).",
    )
    deviceProfile: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="The accelerator to train on, one the deployment declares; unset uses "
        "the deployment's default.",
    )
    hostMemoryGiB: float | None = Field(
        None, gt=0, le=1_000_000, description="Host memory the run's loader needs, in GiB."
    )
    engine: Literal["transformers"] | None = Field(
        None,
        description="The training engine: `transformers` (PyTorch, Transformers and PEFT; "
        "torchrun on several devices).",
    )
    keepRecoverable: int | None = Field(
        None, ge=1, le=100, description="Newest saves kept resumable (training state)."
    )
    keepAdapters: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Newest saved adapters kept; epoch adapters do not count.",
    )
    saveEverySteps: int | None = Field(
        None,
        ge=0,
        le=10_000_000,
        description="Save training state and adapter every N updates; 0 saves only at the end.",
    )
    saveEachEpoch: bool | None = Field(
        None, description="Also save, and keep the adapter, at the end of each epoch."
    )
    memory: MemoryGroup | None = Field(None, description="Memory settings.")
    rollout: RolloutGroup | None = Field(None, description="Rollout engine settings (rl).")
