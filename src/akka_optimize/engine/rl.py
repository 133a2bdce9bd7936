"""Group-relative reinforcement updates on a :class:`~akka_optimize.engine.session.TrainingSession`.

One update (:func:`rl_update`), after GRPO (Shao et al. 2024, "DeepSeekMath",
arXiv:2402.03300) and DATA-AND-TRAINING-RULES.md 1.2–1.3, rules 17–21:

1. **Sample.** For each of the update's prompts, ``samples_per_prompt`` completions are
   drawn together (one batch of identical prompts, so no padding) from the session's
   model with its current adapter — the weights after the last ``optim_step`` — at
   ``temperature``, up to ``max_new_tokens`` tokens, ending after a stop token (which is
   part of the completion and trained on). Each token records the sampler's log-prob
   ``log q`` (fp32 ``log_softmax(logits / temperature)``) and each sample the weight
   version (``session.step`` when it was drawn). The draw uses one CPU generator seeded
   by ``(seed, update)``, so a resumed run draws the same samples (rule 20).
2. **Score.** The caller's ``score`` fills each sample's ``reward`` (a float; a reward
   that failed is 0 with its ``error`` kept). The engine knows no grader: the worker
   passes a sandboxed bundle, a judge or a built-in rule.
3. **Advantages** (:func:`group_advantages`): each reward minus its group's mean, divided
   by the group's standard deviation (sample standard deviation, ``n − 1``, as TRL's
   GRPO trainer) unless ``scale_by_std`` is off. A group whose rewards are all equal has
   advantage 0 for every sample, is counted (``zeroAdvantageGroupShare``) and left out of
   the update: it carries no signal, and leaving it out keeps its tokens out of the
   normalisation too (DAPO's "dynamic sampling", Yu et al. 2025, arXiv:2503.14476, without
   the resampling). Every sample of a prompt is in the same update (group integrity, rule
   17); each sample is one sequence of its own pass, never expanded twice (rule 18).
4. **Train.** ``forward_backward`` with ``loss_fn`` (``importance_sampling``, ``ppo``,
   ``cispo``, ``dro``; :mod:`akka_optimize.engine.losses`) over the completion tokens, then
   ``optim_step``, which divides the loss sum by the update's sampled (trained) tokens —
   the same token-sum normalisation as the supervised loss. An update where every group
   had equal rewards trains nothing; its weights stay, and the step still counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.types import Pass
from .errors import EngineError
from .sampling import kv_cache


@dataclass(frozen=True)
class RLSettings:
    """The loop's settings (the plan's ``rlHyperparams``, resolved).

    Attributes:
        samples_per_prompt: completions per prompt (the group), at least 2.
        max_new_tokens: longest completion, in tokens.
        temperature: sampling temperature (> 0).
        loss_fn: ``importance_sampling`` | ``ppo`` | ``cispo`` | ``dro``.
        loss_config: the loss's parameters (``clip_low_threshold``, ``clip_high_threshold``,
            ``beta``; :mod:`akka_optimize.engine.losses` gives their defaults).
        scale_by_std: divide each advantage by its group's standard deviation.
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
    """

    samples_per_prompt: int
    max_new_tokens: int
    temperature: float = 1.0
    loss_fn: str = "importance_sampling"
    loss_config: dict[str, float] = field(default_factory=dict)
    scale_by_std: bool = True
    seed: int = 0
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefix_caching: bool = True
    kv_cache_bytes: int | None = None

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


def group_advantages(rewards: list[float], scale_by_std: bool = True) -> list[float]:
    """Group-relative advantages: ``r − mean(r)``, over the sample standard deviation
    when ``scale_by_std``; all 0 when every reward is equal (module docstring, step 3).

    Raises:
        ValueError: fewer than two rewards (a group needs two to compare).
    """
    n = len(rewards)
    if n < 2:
        raise ValueError(f"a group needs at least 2 samples, not {n}")
    mean = sum(rewards) / n
    if all(r == rewards[0] for r in rewards):
        return [0.0] * n
    centred = [r - mean for r in rewards]
    if not scale_by_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1))
    return [c / std for c in centred]


@torch.no_grad()
def sample_group(
    session: Any,
    prompt_ids: list[int],
    n: int,
    max_new_tokens: int,
    temperature: float,
    stop_ids: set[int],
    generator: torch.Generator,
    prefix_caching: bool = True,
    max_batched_tokens: int | None = None,
) -> list[tuple[list[int], list[float]]]:
    """``n`` completions of one prompt, decoded together with a KV cache: per completion
    its tokens and the sampler's log-probs (see the module docstring, step 1). With
    ``prefix_caching`` the prompt is read once and its cache copied to the ``n`` rows (a
    shared prefix); without, the ``n`` rows read it side by side. The prompt is read in
    pieces so that no forward pass reads more than ``max_batched_tokens`` tokens (all rows
    together; None: no limit).

    Raises:
        ValueError: an empty prompt, ``n`` < 1, ``max_new_tokens`` < 1, ``temperature`` ≤ 0,
            or ``max_batched_tokens`` below ``n`` (a decode step reads one token per row).
    """
    if not prompt_ids or n < 1 or max_new_tokens < 1 or temperature <= 0:
        raise ValueError("sample_group needs a prompt, n ≥ 1, max_new_tokens ≥ 1, temperature > 0")
    if max_batched_tokens is not None and max_batched_tokens < n:
        raise ValueError(f"max_batched_tokens {max_batched_tokens} is below the {n} rows")
    rows = 1 if prefix_caching else n
    piece = len(prompt_ids)
    if max_batched_tokens is not None:
        piece = max(1, min(piece, max_batched_tokens // rows))
    model = session.model
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    tokens: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    done = [False] * n
    try:
        with session.compute_context():
            # the prompt is read once (or by every row) in pieces, then its KV cache is
            # copied to every row of the group
            ids = torch.tensor([prompt_ids] * rows, dtype=torch.long, device=device)
            cache: dict[str, Any] = {}
            for at in range(0, len(prompt_ids), piece):
                out = model(
                    input_ids=ids[:, at : at + piece], use_cache=True, logits_to_keep=1, **cache
                )
                cache = kv_cache(out)
            if rows == 1 and n > 1:
                next(iter(cache.values())).batch_repeat_interleave(n)
            logits = out.logits[:, -1, :].expand(n, -1)
            for _ in range(max_new_tokens):
                logq = torch.log_softmax(logits.float().cpu() / temperature, dim=-1)
                picked = torch.multinomial(logq.exp(), 1, generator=generator).view(-1)
                for b in range(n):
                    if done[b]:
                        continue
                    tok = int(picked[b])
                    tokens[b].append(tok)
                    lps[b].append(float(logq[b, tok]))
                    done[b] = tok in stop_ids
                if all(done):
                    break
                step = picked.view(n, 1).to(device)
                out = model(input_ids=step, use_cache=True, **kv_cache(out))
                logits = out.logits[:, -1, :]
    finally:
        model.train(was_training)
    return list(zip(tokens, lps, strict=True))


def rollout_passes(
    prompts: list[RLPrompt], samples: list[Sample], pack: bool = False
) -> tuple[list[Pass], list[dict[str, list[float]]]]:
    """The passes of ``samples`` (prompt + completion each) and their reinforcement inputs,
    aligned to ``input_ids`` like :attr:`Pass.weights`: weight 1 on completion tokens, 0 on
    the prompt; ``sampling_logprobs`` and ``advantages`` set on the completion tokens.

    One pass per sample, or with ``pack`` (a session whose attention keeps packed
    sequences apart: ``TrainingSession._packed_attention``) one pass per group, its
    samples side by side with their own positions and boundaries — never one sample
    twice (rule 18)."""
    singles = []
    for s in samples:
        prompt = prompts[s.group].prompt_ids
        k = len(prompt)
        ids = list(prompt) + list(s.tokens)
        singles.append(
            (
                s.group,
                ids,
                [0.0] * k + [1.0] * len(s.tokens),
                [0.0] * k + list(s.logprobs),
                [0.0] * k + [s.advantage] * len(s.tokens),
            )
        )
    groups: list[list[tuple]] = []
    for item in singles:
        if pack and groups and groups[-1][0][0] == item[0]:
            groups[-1].append(item)
        else:
            groups.append([item])
    passes, inputs = [], []
    for members in groups:
        ids, weights, pos, cu, lq, adv = [], [], [], [0], [], []
        for _g, i, w, q, a in members:
            ids += i
            weights += w
            pos += list(range(len(i)))
            cu.append(len(ids))
            lq += q
            adv += a
        passes.append(Pass(ids, weights, pos, cu, [m[0] for m in members]))
        inputs.append({"sampling_logprobs": lq, "advantages": adv})
    return passes, inputs


def _clipped_share(
    trainer: list[torch.Tensor], inputs: list[dict[str, list[float]]], passes: list[Pass], cfg: dict
) -> float:
    """Share of trained tokens whose ratio ``p/q`` lies outside the clip range."""
    lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
    out = total = 0
    for lp, inp, p in zip(trainer, inputs, passes, strict=True):
        for t, w in enumerate(p.weights):
            if w:
                r = math.exp(float(lp[t]) - inp["sampling_logprobs"][t])
                out += not lo <= r <= hi
                total += 1
    return out / total if total else 0.0


def rl_update(
    session: Any,
    prompts: list[RLPrompt],
    score: Callable[[list[RLPrompt], list[Sample]], None],
    settings: RLSettings,
    stop_ids: set[int],
) -> tuple[dict[str, float | int], list[Sample]]:
    """One group-relative update over ``prompts`` (see the module docstring).

    Args:
        session: the training session (its adapter samples and trains).
        prompts: this update's prompts (``promptsPerStep`` of them).
        score: fills ``reward`` (and ``error``) of every sample; called once per update
            with every sample, so a grader pool or a judge can batch them.
        settings: the loop's settings.
        stop_ids: tokens that end a completion.

    Returns:
        ``(metrics, samples)``: the supervised step metrics of ``optim_step`` under the
        same names (``loss`` is the policy loss per trained token, ``gradNorm``,
        ``gradClipFactor``, ``adapterNorm``, ``updateRatio``…), plus ``rewardMean``,
        ``rewardStd``, ``rewardMin``, ``rewardMax``, ``rewardErrors``,
        ``zeroAdvantageGroupShare``, ``clippedTokenShare``, ``approxKl`` (mean of
        ``log q − log p`` over trained tokens, with ``p`` the trainer's log-probs in the
        update's forward pass), ``completionLength``, ``samplingTokensPerSecond``,
        ``trainingTokensPerSecond``, ``weightVersion`` (before the update) and ``skipped``
        (every group had equal rewards).

    Raises:
        EngineError: a loss this loop does not train with; the session's own errors.
    """
    if settings.loss_fn not in ("importance_sampling", "ppo", "cispo", "dro"):
        raise EngineError(f"rl_update trains with a policy loss, not {settings.loss_fn!r}.")
    update = session.step + 1
    gen = torch.Generator().manual_seed(settings.seed * 1_000_003 + update)
    version = session.step
    t0 = time.perf_counter()
    samples = _sample_rollouts(session, prompts, settings, stop_ids, gen, version)
    sampled = sum(len(s.tokens) for s in samples)
    sampling_s = time.perf_counter() - t0
    score(prompts, samples)
    zero = _assign_advantages(len(prompts), samples, settings.scale_by_std)
    signal = {s.group for s in samples if s.advantage != 0.0}
    trained = [s for s in samples if s.group in signal]
    metrics = _reward_metrics(samples, zero / len(prompts), version)
    metrics["samplingTokensPerSecond"] = sampled / sampling_s if sampling_s > 0 else 0.0
    t1 = time.perf_counter()
    if not trained:
        metrics.update(session.skip_update(), skipped=True, clippedTokenShare=0.0, approxKl=0.0)
        metrics["trainingTokensPerSecond"] = 0.0
        return metrics, samples
    passes, inputs = rollout_passes(prompts, trained, pack=bool(session._packed_attention))
    fb = session.forward_backward(
        passes, settings.loss_fn, loss_inputs=inputs, loss_config=settings.loss_config
    )
    kl = [
        inp["sampling_logprobs"][t] - float(lp[t])
        for lp, inp, p in zip(fb.logprobs, inputs, passes, strict=True)
        for t, w in enumerate(p.weights)
        if w
    ]
    clipped = _clipped_share(fb.logprobs, inputs, passes, settings.loss_config)
    metrics.update(session.optim_step())
    seconds = time.perf_counter() - t1
    metrics.update(
        skipped=False,
        clippedTokenShare=clipped,
        approxKl=sum(kl) / len(kl),
        trainingTokensPerSecond=sum(p.num_tokens for p in passes) / seconds if seconds else 0.0,
    )
    return metrics, samples


def _sample_rollouts(
    session: Any,
    prompts: list[RLPrompt],
    settings: RLSettings,
    stop_ids: set[int],
    gen: torch.Generator,
    version: int,
) -> list[Sample]:
    """``samplesPerPrompt`` completions of every prompt, group ``g`` for ``prompts[g]``,
    decoded in batches of as many rows as the rollout KV-cache budget holds
    (:func:`rows_that_fit`), each tagged with the weight ``version`` that sampled it."""
    samples: list[Sample] = []
    per_token = kv_bytes_per_token(session.model.config, next(session.model.parameters()).dtype)
    for g, prompt in enumerate(prompts):
        batch = rows_that_fit(settings, per_token, len(prompt.prompt_ids))
        for first in range(0, settings.samples_per_prompt, batch):
            for toks, lps in sample_group(
                session,
                prompt.prompt_ids,
                min(batch, settings.samples_per_prompt - first),
                settings.max_new_tokens,
                settings.temperature,
                stop_ids,
                gen,
                prefix_caching=settings.prefix_caching,
                max_batched_tokens=settings.max_num_batched_tokens,
            ):
                samples.append(Sample(g, toks, lps, version))
    return samples


def _assign_advantages(groups: int, samples: list[Sample], scale_by_std: bool) -> int:
    """Set each sample's group-relative advantage (:func:`group_advantages`) and return
    how many groups have every advantage zero (equal rewards: no signal)."""
    zero = 0
    for g in range(groups):
        group = [s for s in samples if s.group == g]
        advantages = group_advantages([s.reward for s in group], scale_by_std)
        for s, a in zip(group, advantages, strict=True):
            s.advantage = a
        zero += all(s.advantage == 0.0 for s in group)
    return zero


def _reward_metrics(
    samples: list[Sample], zero_share: float, version: int
) -> dict[str, float | int]:
    """The reward side of an update's metrics: mean, population std, min and max of the
    rewards, grader errors, the share of zero-advantage groups, the mean completion
    length in tokens and the weight version that sampled them."""
    rewards = [s.reward for s in samples]
    mean = sum(rewards) / len(rewards)
    return {
        "rewardMean": mean,
        "rewardStd": math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
        "rewardMin": min(rewards),
        "rewardMax": max(rewards),
        "rewardErrors": sum(s.error is not None for s in samples),
        "zeroAdvantageGroupShare": zero_share,
        "completionLength": sum(len(s.tokens) for s in samples) / len(samples),
        "weightVersion": version,
    }


@dataclass
class RLResult:
    """How a call to :func:`run_rl` ended.

    Attributes:
        step / total_steps: the last completed update and the run's updates.
        stopped: it stopped early after saving (pause or cancel).
        final_loss / mean_loss: the policy loss of the last update, and the mean over the
            updates that trained.
        first_reward / final_reward: the mean reward of the run's first and last update
            (the first of this attempt when resumed: see ``log``).
        adapter_dir: the newest saved adapter.
        adapted_modules: module names that received a LoRA pair.
    """

    step: int
    total_steps: int
    stopped: bool = False
    final_loss: float | None = None
    mean_loss: float | None = None
    first_reward: float | None = None
    final_reward: float | None = None
    adapter_dir: Path | None = None
    adapted_modules: list[str] = field(default_factory=list)


def update_prompts(prompts: list[RLPrompt], update: int, per_step: int) -> list[RLPrompt]:
    """The prompts of 1-based ``update``: the next ``per_step`` of the dataset in order,
    wrapping around (so update ``u`` always takes the same ones, and a resume too)."""
    n = len(prompts)
    start = (update - 1) * per_step
    return [prompts[(start + i) % n] for i in range(per_step)]


def run_rl(
    cfg: Any,
    settings: RLSettings,
    model_dir: Path,
    prompts: list[RLPrompt],
    *,
    steps: int,
    prompts_per_step: int,
    score: Callable[[list[RLPrompt], list[Sample]], None],
    stop_ids: set[int],
    state_dir: Path,
    emit: Callable[[dict[str, Any]], None],
    resume_step: int | None = None,
    init_adapter: Path | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RLResult:
    """A reinforcement run: ``steps`` updates of :func:`rl_update`, with the saves, events
    and resume of a supervised run (:func:`akka_optimize.engine.sft.run_sft`).

    Emits ``metrics`` (per update: :func:`rl_update`'s metrics, ``step`` first),
    ``samples`` (per update: the first :data:`SHOWN_SAMPLES` samples' ``row`` — the
    prompt's 0-based index in ``prompts`` —, ``group``, ``tokens``, ``reward``,
    ``advantage`` and ``error``), ``save`` (every ``cfg.save_every_steps`` updates, when stopping,
    and at the end; ``epoch`` None) and ``phase`` events.

    Raises:
        EngineError: no prompts, a resume whose saved settings differ, or the session's
            own errors.
    """
    from .sft import end_phase

    if not prompts:
        raise EngineError("the reinforcement run has no prompts.", code="no_rows")
    session, log = _start_rl_session(
        cfg, model_dir, state_dir, len(prompts), steps, emit, resume_step, init_adapter
    )
    result = RLResult(0, steps, adapted_modules=session.adapted_modules)
    reward = None
    for update in range(session.step + 1, steps + 1):
        batch = update_prompts(prompts, update, prompts_per_step)
        metrics, samples = rl_update(session, batch, score, settings, stop_ids)
        emit({"type": "metrics", **metrics})
        emit(samples_event(samples, update, prompts_per_step, len(prompts)))
        reward = metrics["rewardMean"]
        if log["first_reward"] is None:
            log["first_reward"] = reward
        if not metrics.get("skipped"):
            log["loss_sum"] += float(metrics["loss"])
            log["count"] += 1
            log["last"] = float(metrics["loss"])
        stopping = update < steps and bool(should_stop and should_stop())
        every = cfg.save_every_steps and update % cfg.save_every_steps == 0
        if update == steps or every or stopping:
            log["last_reward"] = reward
            result.adapter_dir = _save_rl(
                session, cfg, model_dir, state_dir, len(prompts), log, emit
            )
        if stopping:
            result.stopped = True
            break
    result.step = session.step
    result.final_loss = log["last"]
    result.mean_loss = log["loss_sum"] / log["count"] if log["count"] else None
    result.first_reward = log["first_reward"]
    result.final_reward = reward if reward is not None else log.get("last_reward")
    emit(end_phase(result))
    return result


def _start_rl_session(
    cfg: Any,
    model_dir: Path,
    state_dir: Path,
    rows: int,
    steps: int,
    emit: Callable[[dict[str, Any]], None],
    resume_step: int | None,
    init_adapter: Path | None,
) -> tuple[Any, dict[str, Any]]:
    """Load the model for a reinforcement run, restore its state on a resume or warm-start
    the adapter; emits ``loading_model`` and ``training``. Returns the session and the
    loss and reward log the loop goes on with.

    Raises:
        EngineError: a resume whose state was saved over another number of prompts.
    """
    from .session import TrainingSession
    from .sft import state_path, training_phase

    emit({"type": "phase", "phase": "loading_model", "step": resume_step or 0})
    session = TrainingSession(model_dir, cfg, total_updates=steps)
    log: dict[str, Any] = {"loss_sum": 0.0, "count": 0, "last": None, "first_reward": None}
    if resume_step is not None:
        meta = session.load_state(state_path(state_dir, resume_step) / "state")
        if meta["cursor"].get("rows") != rows:
            raise EngineError(
                f"the training state at step {resume_step} was saved over "
                f"{meta['cursor'].get('rows')} prompts, not {rows}; a resume "
                "continues the same run with its own dataset.",
                code="resume_mismatch",
            )
        log = dict(meta["cursor"]["log"])
    elif init_adapter is not None:
        session.load_adapter_weights(init_adapter)
    emit(training_phase(session, steps))
    return session, log


def samples_event(
    samples: list[Sample], update: int, prompts_per_step: int, rows: int
) -> dict[str, Any]:
    """The ``samples`` event of one update: its first :data:`SHOWN_SAMPLES` samples, each
    with ``row`` (the prompt's 0-based index in the run's prompts), ``group``, ``tokens``,
    ``reward``, ``advantage`` and ``error``."""
    return {
        "type": "samples",
        "step": update,
        "samples": [
            {
                "row": ((update - 1) * prompts_per_step + s.group) % rows,
                "group": s.group,
                "tokens": s.tokens,
                "reward": s.reward,
                "advantage": s.advantage,
                "error": s.error,
            }
            for s in samples[:SHOWN_SAMPLES]
        ],
    }


SHOWN_SAMPLES = 8
"""Samples of each update kept for ``runs samples`` (the first ones, in prompt order)."""


def _save_rl(
    session: Any, cfg: Any, model_dir: Path, state_dir: Path, prompts: int, log: dict, emit: Any
) -> Path:
    from .sft import save_snapshot

    # the cursor's "rows" (here: prompts) is what a resume checks, as a supervised save's
    return save_snapshot(session, cfg, model_dir, state_dir, None, False, prompts, log, emit)
