"""One LoRA training session: the engine's seam (DESIGN.md "The engine's seam").

Primitives of a remote training API — ``forward_backward``, ``forward``,
``optim_step``, ``sample``, ``save_state`` / ``load_state``, ``save_adapter`` — over
a transformers causal LM with a PEFT LoRA adapter. Inputs are
:class:`akka_optimize.data.types.Pass` objects: whole conversations packed into one
sequence whose ``position_ids`` restart per conversation. The body is called with
``attention_mask=None`` and ``use_cache=False``, which makes transformers isolate
the packed conversations (DESIGN.md "Verified facts"); ``weights[0]`` of every
conversation is 0, so no label crosses a boundary.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from ..data.types import Pass
from .attention import SEGMENTS_KWARG, implementation_for, supports_packed
from .attention import register as register_packed_attention
from .config import EngineConfig
from .errors import EngineError, EngineOutOfMemory
from .head import body_and_head, chunked_loss
from .losses import LOSSES, REINFORCEMENT_INPUTS
from .sampling import generate
from .schedule import lr_factor
from .targets import auto_class, check_targets, peft_targets


class ForwardBackwardResult(NamedTuple):
    """What one ``forward_backward`` / ``forward`` call returns.

    Attributes:
        loss_sum: the summed loss over every scored token of every pass (not a mean).
        supervised_tokens: scored tokens (non-zero weight) over all passes.
        logprobs: per pass, float32 [T] on CPU: log p(input_ids[t] | input_ids[:t]) at
            scored positions, 0.0 elsewhere (aligned like ``Pass.weights``).
    """

    loss_sum: float
    supervised_tokens: int
    logprobs: list[Tensor]


@dataclass
class _Pending:
    loss_sum: float = 0.0
    supervised: int = 0
    tokens: int = 0
    largest_pass: int = 0
    started: float | None = None


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


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text
    )


class TrainingSession:
    """A base model with a trainable LoRA adapter, AdamW and a learning-rate schedule.

    Args:
        model_dir: a Hugging Face model folder (config.json + safetensors).
        cfg: the engine settings.
        total_updates: updates in the whole run (for the schedule); ``None`` keeps the
            peak rate.

    Attributes:
        adapted_modules: full module paths that received a LoRA pair, sorted
            (``model.language_model.layers.0.self_attn.q_proj``).
        adapted_module_count: how many modules were adapted.
        step: updates applied so far.

    Raises:
        EngineError: a target module matches nothing in the model.
    """

    def __init__(
        self, model_dir: Path, cfg: EngineConfig, *, total_updates: int | None = None
    ) -> None:
        from peft import LoraConfig, get_peft_model

        self.cfg = cfg
        self.model_dir = Path(model_dir)
        self.device = pick_device(cfg)
        self.dtype = pick_dtype(cfg, self.device)
        self.weight_dtype = pick_weight_dtype(cfg, self.device)
        self.total_updates = total_updates
        self.schedule_start = 0
        """Updates before this run's own schedule began (a branch's snapshot step)."""
        self.step = 0
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.model_dir)
        base = (
            auto_class(cfg.auto_class)
            .from_pretrained(
                self.model_dir,
                dtype=self.weight_dtype,
                attn_implementation=implementation_for(config, cfg.attn_implementation),
            )
            .to(self.device)
        )
        # sdpa over a packed pass: attend per conversation, not through a T×T mask.
        self._packed_attention = cfg.attn_implementation == "sdpa" and supports_packed(base.config)
        if self._packed_attention:
            base.set_attn_implementation(
                implementation_for(base.config, register_packed_attention())
            )
        check_targets(base, cfg.target_modules)
        torch.manual_seed(cfg.seed)
        lora = LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=peft_targets(cfg.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            # transformers 5 deprecates the attribute PEFT still reads; nothing to act on.
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing.*", FutureWarning)
            self.model = get_peft_model(base, lora)
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.model.config.use_cache = False
        prefix = "base_model.model."
        self.adapted_modules = sorted(
            n.removeprefix(prefix).replace("._checkpoint_wrapped_module", "")
            for n, m in self.model.named_modules()
            if hasattr(m, "lora_A") and len(m.lora_A)
        )
        self.adapted_module_count = len(self.adapted_modules)
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()),
            lr=cfg.learning_rate,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon,
            weight_decay=cfg.weight_decay,
        )
        self._causal_lm = self.model.get_base_model()
        self._body, self._head, self._cap = body_and_head(self._causal_lm)
        self.vocab_size = int(self._head.weight.shape[0])
        """Rows of the output head (the vocabulary the loss is over)."""
        self._pending = _Pending()
        self._tokenizer = None
        self.model.train()

    # ----------------------------------------------------------------- passes
    def _run_pass(
        self,
        p: Pass,
        loss_fn: str,
        inputs: dict[str, list[float]] | None,
        config: dict,
        backward: bool,
    ) -> tuple[float, int, Tensor]:
        dev = self.device
        ids_T = torch.tensor(p.input_ids, dtype=torch.long)
        w_T = torch.tensor(p.weights, dtype=torch.float32)
        idx_S = (w_T[1:] != 0).nonzero().squeeze(1)  # hidden position t predicts token t+1
        out_T = torch.zeros(len(p.input_ids), dtype=torch.float32)
        if idx_S.numel() == 0:
            return 0.0, 0, out_T
        loss_inputs = {"weights": w_T[1:][idx_S].double().to(dev)}
        for key in REINFORCEMENT_INPUTS if loss_fn != "cross_entropy" else ():
            if not inputs or key not in inputs or len(inputs[key]) != len(p.input_ids):
                raise EngineError(
                    f"loss {loss_fn} needs {key} for every token of each pass (rows {p.rows})."
                )
            loss_inputs[key] = torch.tensor(inputs[key], dtype=torch.float64)[1:][idx_S].to(dev)
        fn = LOSSES[loss_fn]
        with self.compute_context():
            return self._run_pass_body(p, ids_T, idx_S, out_T, loss_inputs, fn, config, backward)

    def compute_context(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` to the compute dtype when the weights are stored in another one."""
        if self.dtype == self.weight_dtype:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _run_pass_body(
        self,
        p: Pass,
        ids_T: Tensor,
        idx_S: Tensor,
        out_T: Tensor,
        loss_inputs: dict[str, Tensor],
        fn: Any,
        config: dict,
        backward: bool,
    ) -> tuple[float, int, Tensor]:
        dev = self.device
        segments = {SEGMENTS_KWARG: list(p.cu_seqlens)} if self._packed_attention else {}
        hidden = self._body(
            input_ids=ids_T[None].to(dev),
            position_ids=torch.tensor(p.position_ids, dtype=torch.long)[None].to(dev),
            attention_mask=None,
            use_cache=False,
            **segments,
        ).last_hidden_state[0]
        idx_dev = idx_S.to(dev)
        loss, lp_S = chunked_loss(
            self._head,
            hidden.index_select(0, idx_dev),
            ids_T[1:][idx_S].to(dev),
            self._cap,
            self.cfg.head_chunk_tokens,
            lambda lp, sl: fn(lp, {k: v[sl] for k, v in loss_inputs.items()}, config),
            backward=backward,
        )
        out_T[idx_S + 1] = lp_S.float().cpu()
        return loss, int(idx_S.numel()), out_T

    def _passes(
        self,
        passes: list[Pass],
        loss_fn: str,
        loss_inputs: list[dict[str, list[float]]] | None,
        loss_config: dict | None,
        backward: bool,
    ) -> ForwardBackwardResult:
        if loss_fn not in LOSSES:
            raise EngineError(f"unknown loss_fn {loss_fn!r}; use one of {sorted(LOSSES)}.")
        total, tokens, lps = 0.0, 0, []
        for i, p in enumerate(passes):
            inputs = loss_inputs[i] if loss_inputs else None
            try:
                loss, n, lp = self._run_pass(p, loss_fn, inputs, loss_config or {}, backward)
            except Exception as exc:
                if _is_oom(exc):
                    raise EngineOutOfMemory(
                        step=self.step + 1,
                        micro_batch=len(p.rows) or 1,
                        pass_tokens=p.num_tokens,
                        device=self.device.type,
                    ) from exc
                raise
            total, tokens = total + loss, tokens + n
            lps.append(lp)
        return ForwardBackwardResult(total, tokens, lps)

    def forward_backward(
        self,
        passes: list[Pass],
        loss_fn: str = "cross_entropy",
        *,
        loss_inputs: list[dict[str, list[float]]] | None = None,
        loss_config: dict | None = None,
    ) -> ForwardBackwardResult:
        """Forward and backward over ``passes``; gradients of the loss **sum** accumulate.

        Args:
            passes: packed passes, one forward each (batch dimension 1).
            loss_fn: cross_entropy | importance_sampling | ppo | cispo | dro.
            loss_inputs: per pass, for the reinforcement losses, ``sampling_logprobs`` and
                ``advantages`` lists of length T aligned like ``Pass.weights``; the
                positions scored are those with a non-zero weight.
            loss_config: loss parameters (``clip_low_threshold``, ``clip_high_threshold``, ``beta``).

        Raises:
            EngineOutOfMemory: the device ran out of memory.
            EngineError: unknown loss or missing reinforcement inputs.
        """
        pend = self._pending
        if pend.started is None:
            pend.started = time.perf_counter()
        self.model.train()
        res = self._passes(passes, loss_fn, loss_inputs, loss_config, backward=True)
        pend.loss_sum += res.loss_sum
        pend.supervised += res.supervised_tokens
        pend.tokens += sum(p.num_tokens for p in passes)
        pend.largest_pass = max([pend.largest_pass] + [p.num_tokens for p in passes])
        return res

    @torch.no_grad()
    def forward(
        self, passes: list[Pass], loss_fn: str = "cross_entropy", **kw: Any
    ) -> ForwardBackwardResult:
        """Like :meth:`forward_backward` without gradients, in eval mode (no dropout)."""
        self.model.eval()
        try:
            return self._passes(
                passes, loss_fn, kw.get("loss_inputs"), kw.get("loss_config"), backward=False
            )
        finally:
            self.model.train()

    # ----------------------------------------------------------------- update
    def learning_rate(self, update: int) -> float:
        """The rate of 1-based ``update`` under the configured schedule; a branch's
        schedule (warm-up, decay) runs over its own updates, after :attr:`schedule_start`."""
        if not self.total_updates:
            return self.cfg.learning_rate
        c = self.cfg
        start = self.schedule_start
        return c.learning_rate * lr_factor(
            c.scheduler,
            update - start,
            self.total_updates - start,
            c.warmup_ratio,
            c.min_learning_rate_ratio,
        )

    def optim_step(self) -> dict[str, float | int]:
        """Apply one AdamW update from the gradients accumulated since the last one.

        Gradients of the summed loss are divided by the update's supervised tokens
        (behaviours.md 1), clipped to ``max_grad_norm``, and applied at the
        scheduled rate.

        Returns:
            step, loss (per supervised token), learningRate, gradNorm (before clipping),
            gradClipFactor (≤ 1), adapterNorm (before the step), updateRatio
            (‖Δadapter‖ / adapterNorm), supervisedTokens, totalTokens, stepTimeSeconds,
            tokensPerSecond (all tokens of the update / step time).

        Raises:
            EngineError: the update scored no token, or its loss or gradient is not finite.
        """
        pend, c = self._pending, self.cfg
        update = self.step + 1
        if pend.supervised == 0:
            self._reset()
            raise EngineError(f"update {update} has no supervised token; refusing a silent 0 loss.")
        loss = pend.loss_sum / pend.supervised
        params = list(self.params.values())
        for p in params:
            if p.grad is not None:
                p.grad.div_(pend.supervised)
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self._reset()
            raise EngineError(
                f"update {update} produced a non-finite loss ({loss}) or gradient norm ({grad_norm}); "
                "lower config.hyperparams.optimizer.learningRate or use config.model.precision fp32."
            )
        before = [p.detach().clone() for p in params]
        adapter_norm = float(_global_norm(before))
        lr = self.learning_rate(update)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        delta = float(_global_norm([p.detach() - b for p, b in zip(params, before, strict=True)]))
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - (pend.started or time.perf_counter())
        metrics = {
            "step": update,
            "loss": loss,
            "learningRate": lr,
            "gradNorm": grad_norm,
            "gradClipFactor": min(1.0, max_norm / (grad_norm + 1e-6)),
            "adapterNorm": adapter_norm,
            "updateRatio": delta / adapter_norm if adapter_norm > 0 else 0.0,
            "supervisedTokens": pend.supervised,
            "totalTokens": pend.tokens,
            "stepTimeSeconds": seconds,
            "tokensPerSecond": pend.tokens / seconds if seconds > 0 else 0.0,
        }
        self.step = update
        self._reset()
        return metrics

    def skip_update(self) -> dict[str, float | int]:
        """Count an update that trains nothing (a reinforcement update whose every group had
        equal rewards, :mod:`akka_optimize.engine.rl`): the step advances; the weights and
        the optimizer's state stay as they are. Returns the metrics of :meth:`optim_step`,
        with a zero loss, gradient and update."""
        update = self.step + 1
        self._reset()
        self.step = update
        return {
            "step": update,
            "loss": 0.0,
            "learningRate": self.learning_rate(update),
            "gradNorm": 0.0,
            "gradClipFactor": 1.0,
            "adapterNorm": float(_global_norm([p.detach() for p in self.params.values()])),
            "updateRatio": 0.0,
            "supervisedTokens": 0,
            "totalTokens": 0,
            "stepTimeSeconds": 0.0,
            "tokensPerSecond": 0.0,
        }

    def _reset(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._pending = _Pending()

    # ----------------------------------------------------------------- sampling
    def sample(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop_ids: set[int] | None = None,
        seed: int | None = None,
    ) -> list[list[int]]:
        """Generate a completion for each prompt with the current adapter (see :func:`generate`)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        with self.compute_context():
            return self._sample(prompts, max_new_tokens, temperature, top_p, stop_ids, seed)

    def _sample(self, prompts, max_new_tokens, temperature, top_p, stop_ids, seed):  # noqa: ANN001, ANN202
        return [
            generate(
                self.model,
                self._tokenizer,
                p,
                max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                stop_ids=stop_ids,
                seed=seed,
            )
            for p in prompts
        ]

    # ----------------------------------------------------------------- saving
    def save_adapter(self, directory: Path) -> Path:
        """Write the adapter in PEFT format (adapter_config.json + adapter_model.safetensors)."""
        directory = Path(directory)
        with _atomic_dir(directory) as tmp:
            # The base embedding is frozen: never copy it into the adapter (PEFT does for
            # a targeted lm_head tied to it unless told not to).
            self.model.save_pretrained(tmp, safe_serialization=True, save_embedding_layers=False)
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
        try:
            res = set_peft_model_state_dict(self.model, weights)
        except RuntimeError as exc:  # shapes that do not fit
            raise EngineError(f"the warm-start adapter does not fit this model: {exc}") from exc
        missing = [k for k in res.missing_keys if "lora_" in k]
        if missing or res.unexpected_keys:
            raise EngineError(
                f"the warm-start adapter holds {len(weights)} tensors: "
                f"{len(missing)} of this adapter's {len(self.params)} are missing and "
                f"{len(res.unexpected_keys)} are not this model's "
                f"(e.g. {(missing or res.unexpected_keys)[0]}).",
                field="warmStartModelId",
            )
        self._reset()

    def save_state(self, directory: Path, cursor: dict[str, Any] | None = None) -> Path:
        """Write everything needed to continue exactly: adapter tensors (exact dtype),
        AdamW moments, schedule position, RNG states (python, torch, CUDA), the data
        ``cursor`` and the step. The folder appears atomically.
        """
        directory = Path(directory)
        with _atomic_dir(directory) as tmp:
            save_file(
                {n: p.detach().cpu().contiguous() for n, p in self.params.items()},
                tmp / "adapter_state.safetensors",
            )
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
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
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(tensors[n])
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=False))
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


def _global_norm(tensors: list[Tensor]) -> Tensor:
    """L2 norm over all ``tensors`` together (one device sync when read)."""
    return torch.linalg.vector_norm(torch.stack([t.float().norm() for t in tensors]))


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
