"""The engine's settings: one typed, documented dataclass (STYLE.md 7).

The run plan (seeds/000: ``hyperparams.lora``, ``.optimizer``, ``.scheduler``,
``.training``; ``config.model``; ``execution``) is resolved into this by the caller;
the engine itself knows nothing of plans, HTTP or the database.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .errors import EngineError
from .targets import AUTO_CLASSES

DEFAULT_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
SCHEDULES = ("constant", "linear", "cosine")
PRECISIONS = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


CHECK_SETTINGS = {
    "head": "checks.head.max_logprob_error",
    "isolation": "checks.isolation.max_logprob_error",
    "packing": "checks.packing.max_mean_loss_difference",
    "reference": "checks.reference.max_logprob_error",
}
"""The engine setting of each check's bound before the first update
(:mod:`akka_optimize.engine.start_checks`; ``EngineConfig.start_checks`` keys)."""


@dataclass
class EngineConfig:
    """Everything one supervised LoRA run needs besides its model and data.

    Units: learning rates are absolute; ratios are fractions in [0, 1]; steps count
    optimizer updates (1-based in events); token counts are tokens.
    """

    lora_rank: int = 16
    """``hyperparams.lora.rank``: rank r of each LoRA pair (A: r×in, B: out×r)."""
    lora_alpha: float = 32.0
    """``hyperparams.lora.alpha``: the update is scaled by alpha / r."""
    lora_dropout: float = 0.0
    """``hyperparams.lora.dropout``: dropout on the LoRA branch's input (uses the torch RNG)."""
    target_modules: tuple[str, ...] | str = DEFAULT_TARGET_MODULES
    """The catalog entry's ``loraTargetModules``: module-name suffixes (every one must
    match), or one regular expression matched with ``re.fullmatch`` against full module
    names (engine/targets.py)."""
    auto_class: str = "AutoModelForCausalLM"
    """The catalog entry's ``autoClass``: the transformers class that loads the model
    (``AutoModelForImageTextToText`` for multimodal models, towers included)."""

    learning_rate: float = 2e-4
    """``hyperparams.optimizer.learningRate``: peak AdamW learning rate."""
    weight_decay: float = 0.0
    """``hyperparams.optimizer.weightDecay``: decoupled AdamW weight decay."""
    max_grad_norm: float = 1.0
    """``hyperparams.optimizer.maxGradNorm``: clip the global gradient L2 norm; 0 turns clipping off."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8

    scheduler: Literal["constant", "linear", "cosine"] = "linear"
    """``hyperparams.scheduler.kind``: shape of the learning rate after warmup."""
    warmup_ratio: float = 0.0
    """Fraction of all updates spent warming up linearly (rounded up to whole updates)."""
    min_learning_rate_ratio: float = 0.0
    """``minLearningRateRatio``: the last update's rate as a fraction of the peak (linear, cosine)."""

    epochs: int = 1
    """Passes over the whole training set; every conversation trains every epoch."""
    micro_batch: int = 1
    """``microBatchPerGpu``: conversations per pass; with ``token_budget`` set, an update's
    ``micro_batch × gradient_accumulation`` conversations are packed by tokens instead."""
    dynamic_batches: bool = True
    """``data.use_dynamic_bsz``: True packs whole conversations into each pass (best-fit
    decreasing up to ``token_budget``, data/packing.py); False trains one conversation per
    pass, which needs ``micro_batch`` 1."""
    token_budget: int | None = None
    """Most tokens in one pass of a dynamic batch (``config.maxSeqLength`` on one device).
    None packs ``micro_batch`` consecutive conversations per pass, whatever their length."""
    gradient_accumulation: int = 1
    """Passes per update; an update holds micro_batch × gradient_accumulation conversations."""

    max_steps: int | None = None
    """``hyperparams.training.maxSteps``: stop after this many updates (None: every epoch)."""

    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``config.model.precision``: the compute dtype; auto is bf16 on a CUDA device and fp32
    on CPU."""
    weight_precision: Literal["auto", "fp32", "bf16"] = "auto"
    """``config.model.weightPrecision``: the dtype of the trained weights (the LoRA adapter
    and its AdamW state); auto is fp32. The frozen base weights are stored in the compute
    dtype (``precision``). When the adapter's dtype differs from the compute dtype, passes
    run under ``torch.autocast`` (mixed precision: bf16 base and matrix products, fp32
    adapter) — on CPUs with AVX512-BF16 that trains about twice as fast as fp32."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in backward (less memory, ~30% more compute)."""
    attn_implementation: str = "sdpa"
    """``config.model.attentionImplementation`` passed to transformers (sdpa, eager, …)."""
    recompile_limit: int = 8
    """``compile.recompile_limit``: compilations of the flex attention kernel (one per new
    pass shape until Torch marks it dynamic) before Torch runs it uncompiled."""
    accumulated_recompile_limit: int = 256
    """``compile.accumulated_recompile_limit``: the same over every compiled function."""
    fail_on_recompile_limit: bool = False
    """``compile.fail_on_recompile_limit``: fail the run at either limit instead."""
    liger_rms_norm: bool = False
    """``kernels.liger.rms_norm``: Gemma 4's RMSNorms through Liger's kernel (CUDA)."""
    liger_geglu: bool = False
    """``kernels.liger.geglu``: Gemma 4's MLPs through Liger's GeGLU kernel (CUDA)."""
    head_chunk_tokens: int = 512
    """``head.chunk_tokens``: supervised positions per output-head chunk (smaller needs less memory)."""

    seed: int = 0
    """Seeds LoRA initialisation, dropout and the per-epoch shuffle."""
    shuffle: bool = True
    """Shuffle the training rows, differently but reproducibly, each epoch."""
    validation_frequency_steps: int = 0
    """``validationFrequencySteps``: validate every N updates (0: never on a step count)."""
    validate_each_epoch: bool = False
    """``validateEachEpoch``: also validate before the first update and at each epoch end."""
    save_every_steps: int = 0
    """Save training state and adapter every N updates (0: only at the end)."""
    keep_recoverable: int = 1
    """``execution.keepRecoverable``: newest training states kept resumable."""
    save_each_epoch: bool = False
    """``execution.saveEachEpoch``: save (and keep the adapter) at each epoch end."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto picks CUDA when available."""
    ranks: int = 1
    """``execution.gpus``: ranks training together under ``torch.distributed.run`` (one per
    device; on CPU, gloo ranks). An update holds ``micro_batch × gradient_accumulation ×
    ranks`` conversations (:mod:`akka_optimize.engine.distributed`)."""
    sharding: Literal["full", "none"] = "full"
    """``execution.memory.sharding`` with several ranks: ``full`` shards the model, its
    gradients and optimizer state with FSDP2; ``none`` keeps a full replica per rank."""
    sync_once_per_update: bool = True
    """``engine.use_no_sync_for_gradient_accumulation``: combine gradients across ranks once
    per update, after its last pass; false combines them after every pass."""
    compare_replicas: bool = True
    """``checkpoint.compare_replicas``: with sharding ``none``, check before the first save
    that every rank holds the same optimizer state."""
    offload_weights: bool = False
    """``execution.memory.offload.weights`` with ``.optimizer`` (FSDP2 moves them together):
    each rank's shard of the weights and gradients lives in host memory between passes
    (FSDP2's ``CPUOffloadPolicy``), gathered to the device for each layer's compute, and
    the optimizer steps there, so its state stays in host memory too. Several ranks with
    sharding ``full`` only."""
    offload_activations: bool = False
    """``execution.memory.offload.activations``: keep the activations saved for the
    backward pass in host memory (``torch.autograd.graph.save_on_cpu``, pinned on CUDA)."""
    reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    """``dtypes.reduce``: dtype gradients are summed across ranks in (FSDP2's
    ``MixedPrecisionPolicy.reduce_dtype``; the replicas' all-reduce)."""
    buffer_dtype: Literal["fp32", "bf16"] | None = None
    """``dtypes.buffer``: dtype of the model's floating buffers (rotary tables); None keeps
    the dtype the model loads them in."""
    prefetch_weights: bool = True
    """``engine.prefetch_weights``: with FSDP2 shards, gather the next layer's weights during
    the current layer's forward and backward (explicit prefetch); false gathers each layer
    when it runs."""
    pad_bucket: int | None = None
    """``engine.pad_to_length`` with ``engine.pad_to_length_bucket``: pad each training pass
    with a separate all-padding sequence (weight 0) to a multiple of this many tokens; None
    does not pad."""
    start_checks: dict[str, float | None] | None = None
    """``checks.start``: the bounds of the checks before the first update (``head``,
    ``isolation``, ``packing``, ``reference``; :mod:`akka_optimize.engine.start_checks`);
    None skips them."""
    validation_batch: int | None = None
    """``validationBatchSize``: validation conversations per call; None is the number of
    conversations in one update. The validation loss is the same (a token-weighted sum)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form settings carried into saved state for the caller (ignored by the engine)."""

    def __post_init__(self) -> None:
        if not isinstance(self.target_modules, str):
            self.target_modules = tuple(self.target_modules)
        self.validate()

    def validate(self) -> None:
        """Refuse impossible settings with a sentence naming the setting.

        Raises:
            EngineError: the first bad setting (``field`` is its plan path).
        """
        for ok, path, rule in self._adapter_checks() + self._loop_checks():
            if not ok:
                raise EngineError(f"{path} {rule}.", code="invalid_settings", field=path)

    def _adapter_checks(self) -> list[tuple[bool, str, str]]:
        """``(holds, plan path, rule)`` for the LoRA, optimizer and scheduler settings."""
        return [
            (self.lora_rank >= 1, "config.hyperparams.lora.rank", "must be at least 1"),
            (self.lora_alpha > 0, "config.hyperparams.lora.alpha", "must be positive"),
            (0 <= self.lora_dropout < 1, "config.hyperparams.lora.dropout", "must be in [0, 1)"),
            (
                len(self.target_modules) > 0,
                "config.hyperparams.lora.targetModules",
                "must name a module",
            ),
            (
                self.learning_rate > 0,
                "config.hyperparams.optimizer.learningRate",
                "must be positive",
            ),
            (
                self.weight_decay >= 0,
                "config.hyperparams.optimizer.weightDecay",
                "must be at least 0",
            ),
            (
                self.max_grad_norm >= 0,
                "config.hyperparams.optimizer.maxGradNorm",
                "must be at least 0",
            ),
            (
                self.scheduler in SCHEDULES,
                "config.hyperparams.scheduler.kind",
                f"must be one of {SCHEDULES}",
            ),
            (
                0 <= self.warmup_ratio <= 1,
                "config.hyperparams.scheduler.warmupRatio",
                "must be in [0, 1]",
            ),
            (
                0 <= self.min_learning_rate_ratio <= 1,
                "config.hyperparams.scheduler.minLearningRateRatio",
                "must be in [0, 1]",
            ),
        ]

    def _loop_checks(self) -> list[tuple[bool, str, str]]:
        """``(holds, plan path, rule)`` for the training loop, batches, precision, saves and
        device."""
        return [
            (self.epochs >= 1, "config.hyperparams.training.epochs", "must be at least 1"),
            (
                self.max_steps is None or self.max_steps >= 1,
                "config.hyperparams.training.maxSteps",
                "must be at least 1",
            ),
            (1 <= self.ranks <= 64, "execution.gpus", "must be in [1, 64]"),
            (
                self.sharding in ("full", "none"),
                "execution.memory.sharding",
                "must be full or none",
            ),
            (
                not self.offload_weights or (self.ranks > 1 and self.sharding == "full"),
                "execution.memory.offload.weights",
                "needs several ranks with sharding full (FSDP2 offloads the shards)",
            ),
            (
                self.micro_batch >= 1,
                "config.hyperparams.training.microBatchPerGpu",
                "must be at least 1",
            ),
            (
                self.gradient_accumulation >= 1,
                "config.hyperparams.training.gradientAccumulation",
                "must be at least 1",
            ),
            (
                self.precision in PRECISIONS,
                "config.model.precision",
                f"must be one of {PRECISIONS}",
            ),
            (
                self.head_chunk_tokens >= 1,
                "config.engineSettings.head.chunk_tokens",
                "must be at least 1",
            ),
            (
                self.validation_frequency_steps >= 0,
                "config.hyperparams.training.validationFrequencySteps",
                "must be at least 0",
            ),
            (self.save_every_steps >= 0, "execution.saveEverySteps", "must be at least 0"),
            (self.keep_recoverable >= 1, "execution.keepRecoverable", "must be at least 1"),
            (self.device in DEVICES, "execution.device", f"must be one of {DEVICES}"),
            (
                self.dynamic_batches or self.micro_batch == 1,
                "config.hyperparams.training.microBatchPerGpu",
                f"is {self.micro_batch}, but config.data.use_dynamic_bsz false trains one "
                "conversation per pass; set microBatchPerGpu to 1 or use_dynamic_bsz to true",
            ),
            (
                self.token_budget is None or self.token_budget >= 1,
                "config.maxSeqLength",
                "must be at least 1",
            ),
            (self.auto_class in AUTO_CLASSES, "autoClass", f"must be one of {AUTO_CLASSES}"),
        ]

    @property
    def conversations_per_update(self) -> int:
        """Conversations in one update over every rank (the epoch's last may hold fewer)."""
        return self.micro_batch * self.gradient_accumulation * self.ranks

    def updates_per_epoch(self, rows: int) -> int:
        """Updates in one epoch of ``rows`` conversations (the last one may be smaller)."""
        return math.ceil(rows / self.conversations_per_update)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings (for saved state and ``runs get --settings``)."""
        d = asdict(self)
        t = self.target_modules
        d["target_modules"] = t if isinstance(t, str) else list(t)
        return d
