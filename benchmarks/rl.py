"""Reinforcement-loop benchmark (issue 18 "Checks"): rollout tokens/s of the loop's sampler
(:func:`akka_optimize.engine.rl.loop.sample_group`: a prompt's group decoded together with a KV
cache) against plain ``model.generate`` one completion at a time on the same prompts, in
the same run (goal ≥ 2× on CPU through batching); and one whole update's time split into
sampling, scoring (``builtin:math``) and training; rollout tokens/s with ``maxStaleness``
1 against 0; and one update's rate against TRL 1.16's ``GRPOTrainer`` (:mod:`.rl_trl`).

Both sample at temperature 1 and produce exactly ``tokens`` tokens per completion (stops
cleared), on the tiny test model (quick) or SmolLM2-135M, over GSM8K test questions.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run(quick: bool) -> list[dict[str, Any]]:
    """Rollout tokens/s (loop sampler vs sequential generate) and one update's split."""
    import torch
    from transformers import AutoTokenizer

    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.engine.rl.loop import RLPrompt, RLSettings, rl_update, sample_group
    from akka_optimize.engine.session.training import TrainingSession
    from akka_optimize.reinforcement.rewards import math_reward

    from . import rl_trl
    from .serving import _model_dir

    prompts_n, group, tokens = (2, 8, 16) if quick else (4, 8, 48)
    items = [json.loads(x) for x in (REPO / "data/gsm8k/test.jsonl").open()][:prompts_n]
    with tempfile.TemporaryDirectory() as tmp:
        base = _model_dir(Path(tmp), quick)
        tok = AutoTokenizer.from_pretrained(base)
        prompts = [
            RLPrompt(
                tok.apply_chat_template(
                    [{"role": "user", "content": it["question"]}],
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=True,
                )["input_ids"],
                it["answer"],
            )
            for it in items
        ]
        cfg = EngineConfig(device="cpu", precision="fp32", lora_rank=16, lora_alpha=32)
        session = TrainingSession(base, cfg, total_updates=1)
        total = prompts_n * group * tokens

        def loop(lean: bool = True, sess: Any = session) -> float:
            gen = torch.Generator().manual_seed(0)
            t0 = time.perf_counter()
            for p in prompts:
                sample_group(sess, p.prompt_ids, group, tokens, 1.0, set(), gen, lean=lean)
            return time.perf_counter() - t0

        model = session.model

        def sequential() -> float:
            torch.manual_seed(0)
            model.eval()
            t0 = time.perf_counter()
            with torch.no_grad():
                for p in prompts:
                    ids = torch.tensor([p.prompt_ids])
                    for _ in range(group):
                        model.generate(
                            ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True,
                            temperature=1.0, top_k=0, pad_token_id=tok.eos_token_id,
                        )  # fmt: skip
            model.train()
            return time.perf_counter() - t0

        loop()  # warm-up
        loop_s = min(loop() for _ in range(2))
        steps_s = min(loop(lean=False) for _ in range(2))  # transformers' forward per token
        seq_s = min(sequential() for _ in range(2 if quick else 1))
        bf16 = TrainingSession(
            base, EngineConfig(device="cpu", precision="bf16", weight_precision="bf16",
                               lora_rank=16, lora_alpha=32), total_updates=1,
        )  # fmt: skip
        loop(sess=bf16)  # warm-up
        bf16_s = min(loop(sess=bf16) for _ in range(2))
        del bf16

        timing: dict[str, float] = {}

        def score(ps: list[RLPrompt], samples: list[Any]) -> None:
            t0 = time.perf_counter()
            for s in samples:
                s.reward = math_reward(tok.decode(s.tokens, skip_special_tokens=True),
                                       ps[s.group].ground_truth)  # fmt: skip
            # a random reward when nothing is right, so the update trains
            if all(s.reward == 0 for s in samples):
                for i, s in enumerate(samples):
                    s.reward = float(i % 2)
            timing["scoring"] = time.perf_counter() - t0

        settings = RLSettings(samples_per_prompt=group, max_new_tokens=tokens, temperature=1.0)
        t0 = time.perf_counter()
        m, samples = rl_update(session, prompts, score, settings, stop_ids=set())
        whole = time.perf_counter() - t0
        sampled = sum(len(s.tokens) for s in samples)
        sampling = sampled / m["samplingTokensPerSecond"]
        training = whole - sampling - timing["scoring"]
        stale = {k: _loop_tokens_per_s(base, cfg, prompts, settings, score, k) for k in (0, 1)}
        versus_trl = rl_trl.rows(base, cfg, items, prompts, group, tokens, quick)
    return [
        *versus_trl,
        {
            "name": "rl_rollout_tokens_per_s_max_staleness_1",
            "value": round(stale[1], 1),
            "unit": "tokens/s",
            "baseline": round(stale[0], 1),
            "ratio": round(stale[1] / stale[0], 3),
            "goal": "ratio >= 1.3 on 2 cores (issue 52: sampling overlaps training)",
            "detail": f"{STALE_UPDATES} updates of {prompts_n} prompts x {group} samples x "
            f"{tokens} tokens: sampled tokens / the loop's wall time, maxStaleness 1 "
            "(samples drawn on a thread while the update before trains) vs 0 (on-policy)",
        },
        {
            "name": "rl_rollout_tokens_per_s",
            "value": round(total / loop_s, 1),
            "unit": "tokens/s",
            "baseline": round(total / seq_s, 1),
            "ratio": round(seq_s / loop_s, 3),
            "goal": "ratio >= 2 on CPU (baseline: model.generate one completion at a time)",
            "detail": f"{prompts_n} prompts x {group} samples x {tokens} tokens, temperature 1",
        },
        {
            "name": "rl_rollout_lean_steps",
            "value": round(total / loop_s, 1),
            "unit": "tokens/s",
            "baseline": round(total / steps_s, 1),
            "ratio": round(steps_s / loop_s, 3),
            "detail": "the loop's sampler with the lean decoding steps vs the same sampler "
            "decoding through transformers' forward (lean=False), fp32, same samples",
        },
        {
            "name": "rl_rollout_bf16",
            "value": round(total / bf16_s, 1),
            "unit": "tokens/s",
            "baseline": round(total / steps_s, 1),
            "ratio": round(steps_s / bf16_s, 3),
            "goal": "ratio >= 2 (issue 24 item 3: twice the sampler before the lean steps)",
            "detail": "a bf16 session (bf16 base and adapter) with the lean steps vs the fp32 "
            "sampler through transformers' forward",
        },
        {
            "name": "rl_update_seconds",
            "value": round(whole, 3),
            "unit": "s",
            "baseline": None,
            "ratio": None,
            "detail": f"sampling {sampling:.3f} s, scoring {timing['scoring']:.3f} s, "
            f"training {training:.3f} s ({m['supervisedTokens']} trained tokens)",
        },
    ]


STALE_UPDATES = 4
"""Updates of the maxStaleness comparison (its first update cannot overlap)."""


def _loop_tokens_per_s(
    base: Path, cfg: Any, prompts: list[Any], settings: Any, score: Any, staleness: int
) -> float:
    """Sampled tokens per second of wall time over :data:`STALE_UPDATES` updates of a fresh
    session with ``maxStaleness`` = ``staleness`` (the loop of
    :func:`akka_optimize.engine.rl.loop.run_rl`, without its saves)."""
    from dataclasses import replace

    from akka_optimize.engine.rl.loop import rl_update
    from akka_optimize.engine.rl.offpolicy import RolloutSide
    from akka_optimize.engine.session.training import TrainingSession

    session = TrainingSession(base, cfg, total_updates=STALE_UPDATES)
    settings = replace(settings, max_staleness=staleness)
    side = None
    if staleness:
        side = RolloutSide(session, settings, lambda u: prompts, set(), STALE_UPDATES)
    sampled = 0
    t0 = time.perf_counter()
    try:
        for u in range(1, STALE_UPDATES + 1):
            drawn = side.take(u) if side else None
            _m, samples = rl_update(session, prompts, score, settings, set(), drawn=drawn)
            if side:
                side.publish(session)
            sampled += sum(len(s.tokens) for s in samples)
    finally:
        if side:
            side.close()
    return sampled / (time.perf_counter() - t0)


if __name__ == "__main__":
    import sys

    print(json.dumps(run("--full" not in sys.argv), indent=2))
