"""One reinforcement update against TRL 1.16's ``GRPOTrainer`` (issue 52 "Checks"): updates
per second of the loop's :func:`akka_optimize.engine.rl.loop.rl_update` (sample, score, train)
and of a ``GRPOTrainer`` step (generate, reward, train) on the same prompts, base model,
group size, completion length, LoRA (rank, alpha, targets), learning rate and reward, in
the same run (goal ≥ 2×).

Both sides compute in fp32 on the same device without gradient checkpointing (TRL's GRPO
default turns it on; the loop does not use it), sample at temperature 1 without top-k, and
produce exactly ``tokens`` tokens per completion (the loop with no stop tokens, TRL with
``min_new_tokens``). TRL trains without a reference model (``beta`` 0, its default) and one
step per generation (``steps_per_generation`` 1, ``num_iterations`` 1), as the loop does.
The first update of each side is a warm-up, left out. On a CPU both sides are measured
twice: with torch's own thread count and with one thread.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any


def reward_of() -> Any:
    """The benchmark's reward on text: ``builtin:math`` against the gold answer; when every
    completion of a batch scores 0, alternating 0 and 1 so that the update trains."""
    from akka_optimize.reinforcement.rewards import math_reward

    def score(texts: list[str], golds: list[str]) -> list[float]:
        got = [math_reward(t, g) for t, g in zip(texts, golds, strict=True)]
        return got if any(got) else [float(i % 2) for i in range(len(got))]

    return score


def ours(base: Path, cfg: Any, prompts: list[Any], group: int, tokens: int, updates: int) -> float:
    """Updates per second of :func:`rl_update` over ``prompts`` (a fresh session)."""
    from transformers import AutoTokenizer

    from akka_optimize.engine.rl.loop import RLSettings, rl_update
    from akka_optimize.engine.session.training import TrainingSession

    tok = AutoTokenizer.from_pretrained(base)
    rate = reward_of()

    def score(ps: list[Any], samples: list[Any]) -> None:
        texts = [tok.decode(s.tokens, skip_special_tokens=True) for s in samples]
        for s, r in zip(
            samples, rate(texts, [ps[s.group].ground_truth for s in samples]), strict=True
        ):
            s.reward = r

    session = TrainingSession(base, cfg, total_updates=updates + 1)
    settings = RLSettings(samples_per_prompt=group, max_new_tokens=tokens, temperature=1.0)
    rl_update(session, prompts, score, settings, stop_ids=set())  # warm-up
    t0 = time.perf_counter()
    for _ in range(updates):
        rl_update(session, prompts, score, settings, stop_ids=set())
    return updates / (time.perf_counter() - t0)


def trl(
    base: Path, cfg: Any, questions: list[str], answers: list[str], group: int, tokens: int,
    updates: int,
) -> float:  # fmt: skip
    """Updates per second of TRL 1.16's ``GRPOTrainer`` steps (one per update, all of
    ``questions`` each, ``group`` completions of each)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(base)
    rate = reward_of()

    def reward(prompts: list, completions: list, answer: list[str], **_kw: Any) -> list[float]:
        return rate([c[-1]["content"] for c in completions], list(answer))

    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": q}], "answer": a}
            for q, a in zip(questions, answers, strict=True)
        ]
        * (updates + 1)
    )
    args = GRPOConfig(
        # the loop's update: every prompt's group, sampled at temperature 1 to full length
        per_device_train_batch_size=len(questions) * group, num_generations=group,
        max_completion_length=tokens, generation_kwargs={"min_new_tokens": tokens},
        temperature=1.0, top_k=0, beta=0.0, steps_per_generation=1, num_iterations=1,
        # its optimizer and precision
        learning_rate=cfg.learning_rate, lr_scheduler_type="constant", seed=cfg.seed,
        gradient_checkpointing=False, bf16=False, use_cpu=True,
        # the run: updates + 1 steps over the prompts in order, nothing saved or reported
        max_steps=updates + 1, shuffle_dataset=False, logging_steps=1, save_strategy="no",
        report_to=[], dataloader_num_workers=0, disable_tqdm=True,
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-bench-"),
    )  # fmt: skip
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *_a: Any, **_kw: Any) -> None:
            marks.append(time.perf_counter())

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        peft_config=LoraConfig(
            r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=list(cfg.target_modules)
        ),
        callbacks=[Clock()],
    )
    trainer.train()
    if len(marks) != updates + 1:
        raise RuntimeError(f"GRPOTrainer ran {len(marks)} steps, not {updates + 1}")
    return updates / (marks[-1] - marks[0])  # the first step (a warm-up) left out


def rows(
    base: Path, cfg: Any, items: list[dict], prompts: list[Any], group: int, tokens: int,
    quick: bool,
) -> list[dict]:  # fmt: skip
    """The benchmark's rows: the loop's updates/s against GRPOTrainer's with torch's own
    thread count, then both on one thread (on a CPU shared with other work, threads that
    spin while waiting for each other slow small operations most)."""
    import torch

    threads = torch.get_num_threads()
    out = [_row(base, cfg, items, prompts, group, tokens, quick, "")]
    if threads > 1 and not torch.cuda.is_available():
        torch.set_num_threads(1)
        try:
            out.append(_row(base, cfg, items, prompts, group, tokens, quick, "_one_thread"))
        finally:
            torch.set_num_threads(threads)
    return out


def _row(
    base: Path, cfg: Any, items: list[dict], prompts: list[Any], group: int, tokens: int,
    quick: bool, suffix: str,
) -> dict:  # fmt: skip
    """One row: the loop's updates/s against GRPOTrainer's at torch's current thread count
    (TRL's failure, or its absence, is the row's ``detail`` and the baseline stays empty)."""
    import importlib.util
    import sys

    import torch

    updates = 1 if quick else 4
    mine = ours(base, cfg, prompts, group, tokens, updates)
    theirs, error = None, None
    if importlib.util.find_spec("trl") is None:
        error = "TRL is not installed (pip install '.[bench]')"
    else:
        try:
            texts = [it["question"] for it in items], [it["answer"] for it in items]
            theirs = trl(base, cfg, *texts, group, tokens, updates)
        except Exception as exc:  # noqa: BLE001 - the row says why
            error = f"GRPOTrainer failed: {str(exc).strip().splitlines()[-1][:300]}"
            print(f"  rl vs trl: {error}", file=sys.stderr, flush=True)
    return {
        "name": "rl_update_vs_trl_grpo" + suffix,
        "value": round(mine, 3),
        "unit": "updates/s",
        "baseline": round(theirs, 3) if theirs else None,
        "ratio": round(mine / theirs, 3) if theirs else None,
        "goal": "ratio >= 2 (issue 52: the loop against TRL 1.16's GRPOTrainer, same run)",
        "detail": f"{updates} timed update(s) each (after one warm-up) of {len(prompts)} prompts x "
        f"{group} samples x {tokens} tokens: sample, score (builtin:math), train; fp32, "
        f"LoRA rank {cfg.lora_rank} on {', '.join(cfg.target_modules)}, no gradient "
        f"checkpointing, no reference model, {torch.get_num_threads()} torch thread(s)"
        + (f"; {error}" if error else ""),
    }
