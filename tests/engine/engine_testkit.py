"""Shared helpers for the engine tests: rows built straight from token ids."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

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


TINY_LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
"""A random Llama's shape for tests that need no tokenizer (add ``vocab_size`` and
``tie_word_embeddings``)."""


FP32_UNIT_ROUNDOFF = 2.0**-24
"""u, the largest relative error of one fp32 rounding (Higham 2002, §2.1)."""


def fp32_order_bound(terms: int, updates: int = 1) -> float:
    """The relative bound for two fp32 computations of one value that differ only in the
    order of a ``terms``-term sum, after ``updates`` optimizer updates.

    Each order is within gamma_n = n*u / (1 - n*u) of the exact sum (Higham 2002, Lemma 3.1
    and eq. 3.4), so the two are within 2*gamma_n of each other; each update carries the
    difference of its own gradient into the weights, and the next forward and backward
    start from weights that differ by it, so to first order the bound grows by that much
    per update. ``terms`` is the longest sum whose order differs (a padded pass's length
    where the dense mask sums over padding that one conversation alone does not; the
    passes of an update where ranks reduce their gradients in another grouping). A bound
    read from what the sums may do, not from one CPU's result: kernels of AVX2 and
    AVX-512 machines group the same sums differently (issue 56). It says nothing of a
    gradient that rounding flips across zero: Adam turns that into a step of up to the
    rate, which is why these tests train with a small learning rate.

    Raises ValueError when n*u reaches 1 (the lemma's condition)."""
    nu = terms * FP32_UNIT_ROUNDOFF
    if nu >= 1:
        raise ValueError(f"{terms} terms: n*u = {nu} is not below 1")
    return 2 * nu / (1 - nu) * updates


def fp32_config(**kw) -> EngineConfig:
    """A CPU fp32 config for tiny-model tests (dropout off unless given)."""
    base = dict(device="cpu", precision="fp32", lora_rank=4, lora_alpha=8, learning_rate=1e-3)
    base.update(kw)
    return EngineConfig(**base)


def adapter_grads(session) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in session.params.items() if p.grad is not None}


def run_on_ranks(model_dir: Path, root: Path, plan: list[dict], ranks: int = 2) -> dict[str, dict]:
    """Run supervised scenarios on ``ranks`` ranks under ``torch.distributed.run`` (one
    launch, tests/engine/ranks_script.py); returns name → rank 0's record (events, step,
    checks, final adapter tensors as lists)."""
    here = Path(__file__).parent
    (root / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), *sys.path]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={ranks}", str(here / "ranks_script.py")]
    proc = subprocess.run(
        [*cmd, str(model_dir), str(root / "plan.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return {sc["name"]: json.loads((root / f"{sc['name']}.json").read_text()) for sc in plan}


def liger_patched(model) -> dict[str, int]:
    """How many modules of ``model`` compute through Liger: ``rms_norm`` and ``geglu``
    (read from the module of each module's ``forward``)."""
    out = {"rms_norm": 0, "geglu": 0}
    for m in model.modules():
        where = getattr(getattr(m, "forward", None), "__module__", None) or ""
        if where.startswith("liger_kernel."):
            for kind in out:
                out[kind] += where.endswith("." + kind)
    return out
