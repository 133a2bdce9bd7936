"""Rollouts on the real vLLM (issue 52 item 6; skipped without a CUDA device and vLLM: CI
has neither; ``scripts/gpu_check.sh`` runs it on a GPU machine). The CPU twin, with vLLM
faked at its boundary, is ``test_engine_rl_vllm.py``; this one checks what only vLLM
can: that the LoRA of each version is the adapter it samples with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from engine_testkit import fp32_config

from akka_optimize.engine.rl.loop import RLPrompt, RLSettings, rl_update, rollout_passes
from akka_optimize.engine.rollout import per_sample
from akka_optimize.engine.rollout_vllm import VLLMRollout, load_vllm
from akka_optimize.engine.session.training import TrainingSession

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
    reason="needs a CUDA device with vLLM installed",
)

PROMPTS = [RLPrompt([1, 2045, 314, 1930, 28, 17]), RLPrompt([1, 45, 14, 190, 28])]


def _score(_prompts, samples) -> None:
    for i, s in enumerate(samples):
        s.reward = float(i % 2)


def _trainer_logprobs(session: TrainingSession, samples: list) -> list[list[float]]:
    passes, _ = rollout_passes(PROMPTS, samples)
    return per_sample(session.forward(passes).logprobs, passes)


def test_vllm_samples_each_version_with_the_trainers_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """After one update (a large step), vLLM samples version 1 through LoRA id 2: its
    log-probs of its own tokens equal the trainer's under version 1, far closer than the
    trainer's under version 0 (a stale adapter would be as far as that)."""
    cfg = fp32_config(device="cuda", weight_precision="fp32", learning_rate=0.1)
    session = TrainingSession(tiny_model_dir, cfg)
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=6, seed=3, memory_share=0.3)
    rollout = VLLMRollout(load_vllm(), session, tiny_model_dir, settings, tmp_path / "w", 64)
    rollout.publish(session)
    drawn = rollout.draw(PROMPTS, settings, set(), 1, 0)
    v0 = {n: p.detach().clone() for n, p in session.params.items()}
    rl_update(session, PROMPTS, _score, settings, set(), drawn=drawn)
    rollout.publish(session)
    samples, _ = rollout.draw(PROMPTS, settings, set(), 2, 1)
    assert {s.weight_version for s in samples} == {1} and rollout.lora(1).lora_int_id == 2
    with torch.no_grad():
        now = _trainer_logprobs(session, samples)
        v1 = {n: p.detach().clone() for n, p in session.params.items()}
        for n, p in session.params.items():
            p.copy_(v0[n])
        stale = _trainer_logprobs(session, samples)
        for n, p in session.params.items():
            p.copy_(v1[n])
    gap = max(
        abs(a - b)
        for s, t in zip(samples, now, strict=True)
        for a, b in zip(s.logprobs, t, strict=True)
    )
    moved = max(
        abs(a - b) for x, y in zip(stale, now, strict=True) for a, b in zip(x, y, strict=True)
    )
    assert gap < 1e-2 and moved > 10 * gap, (gap, moved)
