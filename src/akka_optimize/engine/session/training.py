"""One LoRA training session: the engine's seam (DESIGN.md "The engine's seam").

Primitives of a remote training API — ``forward_backward``, ``forward``,
``optim_step``, ``sample``, ``save_state`` / ``load_state``, ``save_adapter`` — over
a transformers causal LM with a PEFT LoRA adapter. Inputs are
:class:`akka_optimize.data.types.Pass` objects: whole conversations packed into one
sequence whose ``position_ids`` restart per conversation. The body is called with
``attention_mask=None`` and ``use_cache=False``, which makes transformers isolate
the packed conversations (DESIGN.md "Verified facts"); ``weights[0]`` of every
conversation is 0, so no label crosses a boundary.

This module builds the session and owns its updates (``optim_step``, the schedule) and
sampling; the passes are :mod:`akka_optimize.engine.session.passes`, saving and loading
:mod:`akka_optimize.engine.session.state`, device and dtypes
:mod:`akka_optimize.engine.devices`.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import flex
from ..attention import flash_attention_refusal, head_dims, implementation_for, supports_packed
from ..attention import register as register_packed_attention
from ..config import EngineConfig
from ..devices import pick_adapter_dtype, pick_device, pick_dtype, pick_weight_dtype
from ..errors import EngineError
from ..head import body_and_head
from ..kernels import apply_liger
from ..sampling import generate
from ..schedule import lr_factor
from ..targets import auto_class, check_targets, meta_model, peft_targets
from .passes import PassesMixin, Pending
from .ranks import RanksMixin
from .state import StateMixin


class TrainingSession(PassesMixin, StateMixin, RanksMixin):
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
        EngineError: a target module matches nothing in the model; flash_attention_2 that
            cannot run (head dimension above 256, no CUDA, no flash-attn package);
            flex_attention whose kernel cannot run on the CUDA device.
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
        """Storage dtype of the frozen base weights (the compute dtype)."""
        self.adapter_dtype = pick_adapter_dtype(cfg, self.device)
        """Dtype of the LoRA adapter and its optimizer state (``weightPrecision``)."""
        self.total_updates = total_updates
        self.schedule_start = 0
        """Updates before this run's own schedule began (a branch's snapshot step)."""
        self.step = 0
        base = _load_base(self)
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
        for p in self.model.parameters():  # PEFT upcasts a bf16 base's adapter to fp32
            if p.requires_grad:
                p.data = p.data.to(self.adapter_dtype)
        self._causal_lm = self.model.get_base_model()
        self._body, self._head, self._cap = body_and_head(self._causal_lm)
        self._join_ranks()  # several devices: the process group, FSDP2 shards (session_ranks.py)
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()),
            lr=cfg.learning_rate,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon,
            weight_decay=cfg.weight_decay,
        )
        self.vocab_size = int(self._head.weight.shape[0])
        """Rows of the output head (the vocabulary the loss is over)."""
        self._pending = Pending()
        self._tokenizer = None
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
        self._combine_update()  # several ranks: the whole update's sums (session_ranks.py)
        if pend.supervised == 0:
            self._reset()
            raise EngineError(f"update {update} has no supervised token; refusing a silent 0 loss.")
        loss = pend.loss_sum / pend.supervised
        params = list(self.params.values())
        # One foreach kernel per list instead of one launch per adapter tensor (a GPU update
        # is bound by launches: about 2,500 per update went to this bookkeeping).
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_div_(grads, float(pend.supervised))
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        if self.sharded:
            grad_norm = self._clip_sharded(params, max_norm)
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self._reset()
            raise EngineError(
                f"update {update} produced a non-finite loss ({loss}) or gradient norm ({grad_norm}); "
                "lower config.hyperparams.optimizer.learningRate or use config.model.precision fp32."
            )
        before = torch._foreach_mul([p.detach() for p in params], 1.0)  # copies
        norm = self._norm if self.world > 1 else _global_norm
        adapter_norm = float(norm(before))
        lr = self.learning_rate(update)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        delta = float(norm(torch._foreach_sub([p.detach() for p in params], before)))
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

    def optim_step_sum(
        self,
        *,
        learning_rate: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        grad_clip_norm: float,
    ) -> dict[str, float | int]:
        """Apply one AdamW update with the accumulated gradient **as it is** (the Tinker
        API's ``optim_step``; DATA-AND-TRAINING-RULES.md "Remote losses are sums").

        Unlike :meth:`optim_step`, nothing is divided by a token count (the caller
        normalises through the datums' weights), the rate is ``learning_rate`` (no
        schedule), and the gradient is clipped only when ``grad_clip_norm`` > 0. The
        optimizer's hyperparameters are set from the arguments for this update.

        Returns:
            step, lossSum (the summed loss of the passes since the last update), gradNorm
            (before clipping), learningRate, supervisedTokens, totalTokens.

        Raises:
            EngineError: the gradient norm is not finite (nothing is applied).
        """
        pend = self._pending
        update = self.step + 1
        params = list(self.params.values())
        max_norm = grad_clip_norm if grad_clip_norm > 0 else math.inf
        grads = [p for p in params if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
        if not math.isfinite(grad_norm):
            self._reset()
            raise EngineError(
                f"update {update} produced a non-finite gradient norm ({grad_norm}); "
                "nothing was applied."
            )
        for group in self.optimizer.param_groups:
            group.update(lr=learning_rate, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        self.optimizer.step()
        metrics = {
            "step": update,
            "lossSum": pend.loss_sum,
            "gradNorm": grad_norm,
            "learningRate": learning_rate,
            "supervisedTokens": pend.supervised,
            "totalTokens": pend.tokens,
        }
        self.step = update
        self._reset()
        return metrics

    def skip_update(self) -> dict[str, float | int]:
        """Count an update that trains nothing (a reinforcement update whose every group had
        equal rewards, :mod:`akka_optimize.engine.rl.loop`): the step advances; the weights and
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
        stop_strings: tuple[str, ...] = (),
        eos_default: bool = True,
    ) -> list[list[int]]:
        """Generate a completion for each prompt with the current adapter (see :func:`generate`)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        with self.compute_context():
            stops = {"stop_ids": stop_ids, "stop_strings": stop_strings, "eos_default": eos_default}
            return self._sample(prompts, max_new_tokens, temperature, top_p, stops, seed)

    def _sample(self, prompts, max_new_tokens, temperature, top_p, stops, seed):  # noqa: ANN001, ANN202
        return [
            generate(
                self.model,
                self._tokenizer,
                p,
                max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                **stops,
            )
            for p in prompts
        ]


def _global_norm(tensors: list[Tensor]) -> Tensor:
    """L2 norm over all ``tensors`` together (one device sync when read)."""
    return torch.linalg.vector_norm(
        torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float32))
    )


def _load_base(session: TrainingSession) -> Any:
    """The base model on the session's device in its weight dtype, attending as the plan
    asks: sdpa over a packed pass per conversation (``akka_packed``, not through a T×T
    mask), flex_attention through one document mask per pass (``akka_flex``,
    engine/flex.py), flash_attention_2 refused where it cannot run (rule 16); Liger's
    kernels patched in where the settings ask (engine/kernels.py).

    Raises:
        EngineError: flash_attention_2, flex_attention or a Liger kernel cannot run on
            this device or model.
    """
    from transformers import AutoConfig

    cfg, model_dir = session.cfg, session.model_dir
    config = AutoConfig.from_pretrained(model_dir)
    if cfg.attn_implementation == "flash_attention_2":
        refused = flash_attention_refusal(meta_model(model_dir, cfg.auto_class), session.device)
        if refused:
            raise EngineError(refused, field="config.model.attentionImplementation")
    base = (
        auto_class(cfg.auto_class)
        .from_pretrained(
            model_dir,
            dtype=session.weight_dtype,
            attn_implementation=implementation_for(config, _loaded_as(cfg)),
        )
        .to(session.device)
    )
    session._packed_attention = cfg.attn_implementation == "flex_attention" or (
        cfg.attn_implementation == "sdpa" and supports_packed(base.config)
    )
    if cfg.attn_implementation == "flex_attention":
        base.set_attn_implementation(implementation_for(base.config, flex.register()))
        flex.check_device(session.device, head_dims(base), session.dtype)
        flex.use_limits(
            flex.CompileLimits(
                cfg.recompile_limit, cfg.accumulated_recompile_limit, cfg.fail_on_recompile_limit
            )
        )
    elif session._packed_attention:
        base.set_attn_implementation(implementation_for(base.config, register_packed_attention()))
    apply_liger(base, session.device, cfg.liger_rms_norm, cfg.liger_geglu)
    return base


def _loaded_as(cfg: EngineConfig) -> str:
    """The implementation transformers loads the model with: ``flex_attention`` runs are
    loaded with ``sdpa`` and switched to ``akka_flex`` (engine/flex.py) after loading."""
    return "sdpa" if cfg.attn_implementation == "flex_attention" else cfg.attn_implementation
