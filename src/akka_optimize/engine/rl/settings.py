"""The reinforcement loop's records: its settings (:class:`RLSettings`), a prompt
(:class:`RLPrompt`) and a sampled completion (:class:`Sample`), and the rollout's KV-cache
budget (:func:`kv_bytes_per_token`, :func:`rows_that_fit`). The loop itself is
:mod:`akka_optimize.engine.rl.loop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import EngineError


@dataclass(frozen=True)
class RLSettings:
    """The loop's settings (the plan's ``rlHyperparams``, resolved).

    Attributes:
        samples_per_prompt: completions per prompt (the group), at least 2.
        max_new_tokens: longest completion, in tokens.
        temperature: sampling temperature (> 0).
        loss_fn: ``importance_sampling`` | ``ppo`` | ``cispo`` | ``dro`` | ``gspo``
            (:func:`akka_optimize.engine.losses.policy_token_losses`).
        loss_config: the loss's parameters (``clip_low_threshold``, ``clip_high_threshold``,
            ``beta``; :mod:`akka_optimize.engine.losses` gives their defaults).
        aggregation: ``token_mean`` | ``sequence_mean`` | ``dr_grpo``
            (:func:`akka_optimize.engine.losses.aggregation_weights`; the constant of
            ``dr_grpo`` is ``max_new_tokens``).
        correction / correction_cap: the rollout correction ``none`` | ``truncated_is`` |
            ``sequence_mask`` and its cap (:mod:`akka_optimize.engine.rl.gap`).
        max_staleness: updates the rollout weights lag the trainer's at most (0:
            on-policy; :mod:`akka_optimize.engine.rl.offpolicy`).
        group_generators: each group draws from its own generator, seeded by its index in
            the update (:func:`akka_optimize.engine.rl.step.draw`), so that a group's
            samples do not depend on the rank it is dealt to; a run on several ranks sets
            it. Off, one generator per update serves the groups in order.
        advantage_norm: what a group's centred rewards are divided by: ``population_std``
            (rule 19, the default), ``sample_std`` or ``none``
            (:func:`akka_optimize.engine.rl.step.group_advantages`).
        seed: seeds every update's draw together with the update number.
        max_num_seqs: most sequences the sampler decodes in one batch
            (``config.engineSettings.rollout.max_num_seqs``); a larger group is sampled in
            batches of at most this many, one after another, from the same generator.
        max_num_batched_tokens: most tokens one forward pass of the sampler reads
            (``rollout.max_num_batched_tokens``): a decode step reads one token per row, so
            it bounds the rows too; a longer prompt is read in pieces of at most this many
            tokens (chunked prefill).
        prefix_caching: read a group's prompt once and copy its KV cache to every row
            (``rollout.enable_prefix_caching``); off, each row reads the prompt itself.
        kv_cache_bytes: most bytes the sampler's KV cache may take
            (``execution.rollout.memoryShare`` of the device's memory, the deployment
            profile's ``deviceMemoryGiB``, or ``hostMemoryGiB`` on cpu); a group is sampled
            in batches of as many rows as fit (:func:`rows_that_fit`). None: no bound.
        memory_share: ``execution.rollout.memoryShare`` itself (a share in (0, 1]): on
            CUDA with vLLM it is vLLM's ``gpu_memory_utilization``
            (:mod:`akka_optimize.engine.rollout_vllm`). None: unset (0.5 there).
    """

    samples_per_prompt: int
    max_new_tokens: int
    temperature: float = 1.0
    loss_fn: str = "importance_sampling"
    loss_config: dict[str, float] = field(default_factory=dict)
    aggregation: str = "token_mean"
    advantage_norm: str = "population_std"
    correction: str = "none"
    correction_cap: float = 3.0
    max_staleness: int = 0
    group_generators: bool = False
    seed: int = 0
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefix_caching: bool = True
    kv_cache_bytes: int | None = None
    memory_share: float | None = None

    def batch_rows(self) -> int:
        """Rows the sampler decodes at once: ``min(max_num_seqs, max_num_batched_tokens)``."""
        return max(1, min(self.max_num_seqs, self.max_num_batched_tokens))


def kv_bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Bytes of KV cache one token takes: keys and values of every layer,
    ``2 × layers × kv_heads × head_dim × bytes(dtype)`` (a transformers text config;
    grouped-query attention counts its key/value heads)."""
    cfg = getattr(config, "text_config", None) or config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    size = torch.empty((), dtype=dtype).element_size()
    return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * size


def rows_that_fit(settings: RLSettings, per_token: int, prompt_tokens: int) -> int:
    """Rows of one group the sampler decodes at once: :meth:`RLSettings.batch_rows`, and no
    more than ``kv_cache_bytes`` holds at the longest (prompt plus ``max_new_tokens``).

    Raises:
        EngineError: not even one row fits; the sentence names the budget, the row's need
            and ``execution.rollout.memoryShare``.
    """
    rows = settings.batch_rows()
    if settings.kv_cache_bytes is None:
        return rows
    row = per_token * (prompt_tokens + settings.max_new_tokens)
    fit = settings.kv_cache_bytes // max(1, row)
    if fit < 1:
        mib = 1024**2
        raise EngineError(
            f"execution.rollout.memoryShare leaves {settings.kv_cache_bytes / mib:.1f} MiB for "
            f"the rollout's KV cache, and one sample of {prompt_tokens} prompt + "
            f"{settings.max_new_tokens} new tokens needs {row / mib:.1f} MiB; raise "
            "memoryShare or lower rlHyperparams.maxNewTokens."
        )
    return min(rows, fit)


@dataclass(frozen=True)
class RLPrompt:
    """One prompt of the loop: its token ids (the chat template's generation prompt
    appended), and what the reward is given beside a completion — never the prompt."""

    prompt_ids: list[int]
    ground_truth: Any = None
    source: Any = None
    """The caller's own record of the prompt (the worker keeps its evaluation row)."""


@dataclass
class Sample:
    """One sampled completion.

    Attributes:
        group: index of its prompt in the update.
        tokens: the completion's token ids (a final stop token included).
        logprobs: the sampler's ``log q`` of each token (fp32), same length.
        weight_version: ``session.step`` when it was drawn.
        reward / error: set by the caller's ``score`` (a failed reward is 0 with a reason).
        advantage: set by :func:`rl_update`.
    """

    group: int
    tokens: list[int]
    logprobs: list[float]
    weight_version: int
    reward: float = 0.0
    error: str | None = None
    advantage: float = 0.0
