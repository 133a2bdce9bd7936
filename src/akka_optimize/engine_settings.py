"""``config.engineSettings``: every engine setting a plan may state, declared once.

Source: seeds/001 "Set the training engine's settings directly" (weight prefetching and
padding, packing, the rollout engine's batch limits, prefix caching and CUDA graphs;
computation, gradient-reduction and buffer data types; Torch compile recompile limits;
``head.chunk_tokens``; Liger RMSNorm and GeGLU), "A supervised run checks itself before
it trains" (``checks.start`` and the bounds, each a number of at least 0), "Flex
attention for Gemma 4" (``engine.pad_to_length``, ``engine.pad_to_length_bucket``),
"Resume from one of several saves" (``checkpoint.compare_replicas``) and "Other changes"
(``engine.use_no_sync_for_gradient_accumulation``).

Each setting has a dotted key, a type, a default, bounds, the loops it applies to and
the display group (``runs get --settings`` and the dry run show one line per group).
A deployment allows a subset and may change defaults (``engineSettings`` in the
deployment file); nothing here is read with ``cfg.get(key, default)`` elsewhere. The
declarations import nothing of the project and sit below both the deployment file
(:mod:`akka_optimize.deployment_plan` checks its defaults against them) and the plan
(README "Layout": no package imports the plan to read them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Loop = str  # "sft" (a supervised run on more than one device) or "rl"


@dataclass(frozen=True)
class EngineSetting:
    """One declared engine setting.

    Attributes:
        key: the dotted key under ``config.engineSettings``.
        type: ``bool``, ``int``, ``float`` or ``str``.
        default: the value when neither the plan nor the deployment states one; ``None``
            means "computed by the engine" and is documented in ``doc``.
        doc: what the setting does, its unit and its effect on memory or speed.
        loops: the loops it applies to (``sft``: a supervised run on more than one device).
        group: the line it is shown on.
        minimum / maximum: inclusive numeric bounds.
        choices: the allowed strings of a ``str`` setting.
        check_bound: ``"packing"``, ``"isolation"`` or ``"other"`` for a check bound
            (refused when ``checks.start`` is false; packing and isolation bounds also
            when ``data.use_dynamic_bsz`` is false); ``None`` otherwise.
    """

    key: str
    type: type
    default: Any
    doc: str
    loops: tuple[Loop, ...] = ("sft",)
    group: str = "engine"
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    check_bound: str | None = None

    def describe_type(self) -> str:
        """``bool``, ``int in [a, b]``, ``one of x, y`` … for messages and the schema."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.type in (int, float):
            lo = "" if self.minimum is None else f"{self.minimum:g}"
            hi = "" if self.maximum is None else f"{self.maximum:g}"
            return f"{self.type.__name__} in [{lo or '-inf'}, {hi or 'inf'}]"
        return self.type.__name__

    def json_schema(self) -> dict[str, Any]:
        """The JSON-schema fragment of this setting (with ``default`` and bounds)."""
        jtype = {bool: "boolean", int: "integer", float: "number", str: "string"}[self.type]
        out: dict[str, Any] = {
            "type": jtype if self.default is not None else [jtype, "null"],
            "description": self.doc,
            "default": self.default,
            "x-loops": list(self.loops),
            "x-group": self.group,
        }
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.choices:
            out["enum"] = list(self.choices)
        return out


_DTYPES = ("fp32", "bf16")
_S = EngineSetting

# fmt: off
SETTINGS: tuple[EngineSetting, ...] = (
    # engine: padding, prefetching, gradient sync
    _S("engine.pad_to_length", bool, True,
       "Pad each pass to a multiple of engine.pad_to_length_bucket, so shapes repeat and "
       "compiled kernels are reused. flex_attention refuses false."),
    _S("engine.pad_to_length_bucket", int, 1024,
       "Bucket in tokens that each pass is padded up to a multiple of; the padded size counts "
       "against the base model's qualified token limit. flex_attention refuses below 128.",
       minimum=1, maximum=1_048_576),
    _S("engine.prefetch_weights", bool, True,
       "Prefetch the next layer's sharded weights during the current layer's computation "
       "(faster; slightly more device memory)."),
    _S("engine.use_no_sync_for_gradient_accumulation", bool, True,
       "Combine gradients across devices once per update, after the last pass; false combines "
       "them after every pass. With bf16 computation the gradients differ by rounding."),
    # data types (supervised)
    _S("dtypes.compute", str, None,
       "Data type of the forward and backward computation; null follows "
       "config.model.precision.", group="dtypes", choices=_DTYPES),
    _S("dtypes.reduce", str, "fp32",
       "Data type gradients are reduced across devices in.", group="dtypes", choices=_DTYPES),
    _S("dtypes.buffer", str, "fp32",
       "Data type of buffers (norm statistics, rotary tables).", group="dtypes",
       choices=_DTYPES),
    # output head
    _S("head.chunk_tokens", int, 512,
       "Positions the output head computes log-probabilities for at once; smaller needs less "
       "memory.", group="head", minimum=1, maximum=1_048_576),
    # Torch compile
    _S("compile.recompile_limit", int, 8,
       "Recompilations of one compiled function before Torch stops compiling it. The engine "
       "compiles the flex attention kernel of a flex_attention run on CUDA, and nothing else.",
       group="compile", minimum=1, maximum=1024),
    _S("compile.accumulated_recompile_limit", int, 256,
       "Recompilations over all compiled functions before Torch stops compiling.",
       group="compile", minimum=1, maximum=65536),
    _S("compile.fail_on_recompile_limit", bool, False,
       "Fail the run when either recompile limit is reached instead of running uncompiled.",
       group="compile"),
    # Liger kernels (Gemma 4 E2B and E4B only)
    _S("kernels.liger.rms_norm", bool, False,
       "Liger's fused RMSNorm kernel (CUDA; the worker needs akka-optimize[gpu]). Verified for "
       "Gemma 4 E2B and E4B only; refused for any other model, Gemma 4 12B included.",
       group="kernels"),
    _S("kernels.liger.geglu", bool, False,
       "Liger's fused GeGLU kernel (CUDA; the worker needs akka-optimize[gpu]). Verified for "
       "Gemma 4 E2B and E4B only; refused for any other model, Gemma 4 12B included.",
       group="kernels"),
    # checks before the first update
    _S("checks.start", bool, True,
       "Check the output head, the isolation of packed conversations, loss with and without "
       "packing, and the forward pass against plain Transformers before the first update; "
       "false trains without the checks (and refuses any check bound).", group="checks"),
    _S("checks.head.max_logprob_error", float, 1e-3,
       "Largest difference allowed between the chunked output head's log-probabilities and "
       "the full head's.", group="checks", minimum=0, check_bound="other"),
    _S("checks.isolation.max_logprob_error", float, 1e-3,
       "Largest difference allowed between a conversation's log-probabilities packed and "
       "alone.", group="checks", minimum=0, check_bound="isolation"),
    _S("checks.packing.max_mean_loss_difference", float, None,
       "Largest difference allowed between the mean loss with and without packing; null "
       "scales the bound with the number of positions compared, so rounding does not fail "
       "a check on conversations with few supervised tokens.", group="checks", minimum=0,
       check_bound="packing"),
    _S("checks.reference.max_logprob_error", float, 5e-2,
       "Largest difference allowed between the engine's log-probabilities and plain "
       "Transformers' (only on an attempt from a fresh adapter).", group="checks",
       minimum=0, check_bound="other"),
    # saves
    _S("checkpoint.compare_replicas", bool, True,
       "With execution.memory.sharding none, check before the first save that every device "
       "holds the same optimizer state.", group="checkpoint", loops=("sft", "rl")),
    # rollout engine (reinforcement)
    _S("rollout.max_num_seqs", int, 256,
       "Most sequences the rollout engine samples in one batch.", group="rollout",
       loops=("rl",), minimum=1, maximum=65536),
    _S("rollout.max_num_batched_tokens", int, 8192,
       "Most tokens the rollout engine processes in one batch.", group="rollout",
       loops=("rl",), minimum=16, maximum=16_777_216),
    _S("rollout.enable_prefix_caching", bool, True,
       "Reuse the computation of prompt prefixes shared by a group's samples.",
       group="rollout", loops=("rl",)),
    _S("rollout.cuda_graphs", bool, True,
       "Capture CUDA graphs for decoding (faster; more device memory at start).",
       group="rollout", loops=("rl",)),
)
# fmt: on

BY_KEY: dict[str, EngineSetting] = {s.key: s for s in SETTINGS}
GROUP_ORDER: tuple[str, ...] = (
    "engine",
    "dtypes",
    "head",
    "compile",
    "kernels",
    "checks",
    "checkpoint",
    "rollout",
)
LIGER_KEYS: tuple[str, ...] = ("kernels.liger.rms_norm", "kernels.liger.geglu")


def applies(setting: EngineSetting, loop: Loop) -> bool:
    """Whether ``setting`` applies to ``loop`` (``sft`` on several devices, or ``rl``)."""
    return loop in setting.loops


def coerce(setting: EngineSetting, value: Any) -> tuple[Any, str | None]:
    """Check ``value`` against ``setting``'s type and bounds.

    Returns:
        ``(value, None)`` with ints widened to float for a float setting, or
        ``(None, reason)`` where ``reason`` is a sentence fragment naming the bound.
    """
    if value is None:
        if setting.default is None:
            return None, None
        return None, f"must be {setting.describe_type()}, not null"
    t = setting.type
    if t is bool:
        ok = isinstance(value, bool)
    elif t is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok or (t is float and not math.isfinite(value)):
        return None, f"must be {setting.describe_type()}, not {value!r}"
    if setting.choices and value not in setting.choices:
        return None, f"must be {setting.describe_type()}, not {value!r}"
    if setting.minimum is not None and value < setting.minimum:
        return None, f"must be at least {setting.minimum:g}, not {value!r}"
    if setting.maximum is not None and value > setting.maximum:
        return None, f"must be at most {setting.maximum:g}, not {value!r}"
    return value, None


def schema() -> dict[str, Any]:
    """The JSON schema of ``config.engineSettings``: one property per declared key."""
    return {
        "type": ["object", "null"],
        "description": "The training engine's settings by dotted key, when the deployment "
        "allows them. Not on a supervised run on one device.",
        "additionalProperties": False,
        "properties": {s.key: s.json_schema() for s in SETTINGS},
    }
