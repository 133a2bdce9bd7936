"""Shared helpers for the engine tests: rows built straight from token ids."""

from __future__ import annotations

import random

import torch

from akka_optimize.data.types import Example
from akka_optimize.engine.config import EngineConfig


def row(prompt: list[int], answer: list[int], number: int = 0) -> Example:
    """A conversation whose ``answer`` tokens are supervised and ``prompt`` tokens are not."""
    return Example(prompt + answer, [0.0] * len(prompt) + [1.0] * len(answer), number)


def random_rows(n: int, seed: int = 0, vocab: int = 2000) -> list[Example]:
    """``n`` rows of 4–12 prompt and 2–9 answer tokens with ids in 3..vocab."""
    rng = random.Random(seed)
    return [
        row(
            [rng.randrange(3, vocab) for _ in range(rng.randint(4, 12))],
            [rng.randrange(3, vocab) for _ in range(rng.randint(2, 9))],
            i + 1,
        )
        for i in range(n)
    ]


def fp32_config(**kw) -> EngineConfig:
    """A CPU fp32 config for tiny-model tests (dropout off unless given)."""
    base = dict(device="cpu", precision="fp32", lora_rank=4, lora_alpha=8, learning_rate=1e-3)
    base.update(kw)
    return EngineConfig(**base)


def adapter_grads(session) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in session.params.items() if p.grad is not None}
