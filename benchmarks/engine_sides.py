"""The engine benchmark's other sides: TRL's packed ``SFTTrainer`` and the machine's matmul rate.

Issue 24 item 1: the baseline a careful user runs is TRL's ``SFTTrainer`` with its own
packing, not a hand-written padded loop. This side trains the same rows (pre-tokenized
``input_ids`` with a ``completion_mask`` on the answer, ``completion_only_loss=True``), the
same LoRA rank, alpha and target modules, learning rate, gradient clip and precision
(for bf16: the base loaded in bf16, PEFT's fp32 adapter, and ``bf16=True``, which is
Trainer's autocast — the engine's own arrangement), with
``packing=True``, ``packing_strategy="bfd"`` (best-fit decreasing) and padding-free
batches, one packed sequence per update whose ``max_length`` is the largest token count of
the engine's updates. So TRL gets at least the engine's tokens per update.

Its tokens/s counts the real tokens of every update after the first (a collator wrapper
records each batch's token count, a callback each update's end time), which is how the
engine side is timed.

The matmul rate is the machine's practical limit: the best of a few timed
``2048 × 2048 @ 2048 × 2048`` products in the side's own process and dtype. Counting
``4·N`` FLOPs per trained token (forward ``2·N``; the backward of a LoRA run needs only
the activation gradients through the frozen weights, another ``2·N``), ``tokens/s × 4·N``
over that rate is the share of the limit a side reaches.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def matmul_rate(device: str, dtype_name: str, size: int = 2048, repeats: int = 8) -> float:
    """Best measured FLOP/s of a ``size × size`` matrix product (``2·size³`` FLOPs).

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        dtype_name: ``"fp32"`` or ``"bf16"``: the dtype both operands are stored in.
        size: the square matrices' side.
        repeats: timed products; the fastest counts (a burst of load on a shared machine
            does not decide the limit).

    Returns:
        FLOP/s (float).
    """
    import torch

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up (kernel selection, page faults)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.matmul(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def parameter_count(model_dir: Path) -> int:
    """``N`` of the ``4·N`` FLOPs-per-token count: every parameter of the base model,
    embeddings included (tied embeddings counted once), from its safetensors headers."""
    import json
    import struct

    total = 0
    seen: set[str] = set()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name == "__metadata__" or name in seen:
                continue
            seen.add(name)
            count = 1
            for d in meta["shape"]:
                count *= d
            total += count
    return total


def trl_side(model_dir: Path, cfg, batches, device: str, measure_rss) -> dict:
    """Train ``batches`` with TRL's packed, padding-free ``SFTTrainer``; tokens/s and peak.

    Args:
        model_dir: the base model folder.
        cfg: the engine benchmark's :class:`akka_optimize.engine.config.EngineConfig`
            (rank, alpha, targets, learning rate, clip, precision, seed).
        batches: the engine's updates, each a list of ``Example`` (``input_ids``,
            ``weights``); the rows in that order are TRL's dataset.
        device: ``"cpu"`` or ``"cuda"``.
        measure_rss: the benchmark's peak-resident-set context manager class.

    Returns:
        ``{"tokens_per_s", "peak_bytes", "first_loss", "updates", "max_length"}``.
    """
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    rows = [r for b in batches for r in b]
    max_length = max(sum(len(r.input_ids) for r in b) for b in batches)
    data = Dataset.from_dict(
        {
            "input_ids": [list(r.input_ids) for r in rows],
            "completion_mask": [[1 if w else 0 for w in r.weights] for r in rows],
        }
    )
    mixed = cfg.precision == "bf16"
    # As careful as the engine: a bf16 base (PEFT keeps the adapter fp32) under autocast.
    dtype = torch.bfloat16 if mixed else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    args = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
        packing=True,
        packing_strategy="bfd",
        padding_free=True,
        max_length=max_length,
        completion_only_loss=True,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        num_train_epochs=1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=cfg.seed,
        bf16=mixed,
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
        gradient_checkpointing=cfg.gradient_checkpointing,
        disable_tqdm=True,
    )
    peft_config = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=0.0,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, peft_config=peft_config)
    counts: list[int] = []
    collate = trainer.data_collator

    def counting(examples):
        batch = collate(examples)
        counts.append(int(batch["input_ids"].numel()))
        return batch

    trainer.data_collator = counting
    ends: list[float] = []

    class _Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if device == "cuda":
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    trainer.add_callback(_Clock())
    if device == "cuda":
        # As the other sides measure it: peak allocation above the loaded model.
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with measure_rss() as rss:
        trainer.train()
    peak = (torch.cuda.max_memory_allocated() - base) if device == "cuda" else rss.growth
    updates = len(ends)
    if updates < 2:
        raise RuntimeError(f"TRL packed the rows into {updates} update(s); need at least 2")
    tokens = sum(counts[1:updates])
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "tokens_per_s": tokens / (ends[-1] - ends[0]),
        "peak_bytes": peak,
        "first_loss": float(losses[0]) if losses else float("nan"),
        "updates": updates,
        "max_length": max_length,
    }
