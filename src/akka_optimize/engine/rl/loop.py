"""Group-relative reinforcement updates on a :class:`~akka_optimize.engine.session.training.TrainingSession`.

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
   by the group's standard deviation — population (``n``, rule 19, the default), sample
   (``n − 1``, TRL's GRPO trainer) or none (``advantage_norm``). A group whose rewards are
   all equal has advantage 0 for every sample, is counted (``zeroAdvantageGroupShare``)
   and left out of the update: it carries no signal, and leaving it out keeps its tokens
   out of the normalisation too (DAPO's "dynamic sampling", Yu et al. 2025,
   arXiv:2503.14476, without the resampling). Every sample of a prompt is in the same
   update (group integrity, rule 17); each sample is one sequence of its own pass, never
   expanded twice (rule 18).
4. **Train.** The rollout correction (:mod:`akka_optimize.engine.rl.gap`), then
   ``forward_backward`` with the policy loss ``loss_fn`` (``importance_sampling``, ``ppo``,
   ``cispo``, ``dro``, ``gspo``; :func:`akka_optimize.engine.losses.policy_token_losses`)
   over the completion tokens, each token weighted by the loss aggregation
   (:func:`akka_optimize.engine.losses.aggregation_weights`; ``token_mean`` weighs 1), then
   ``optim_step``, which divides the weighted sum by the update's trained tokens — under
   ``token_mean`` the same token-sum normalisation as the supervised loss. The update logs
   the gap between the sampler's and the trainer's log-probs of its tokens. An update
   where every group had equal rewards trains nothing; its weights stay, the step still
   counts, and its metrics log loss 0 with ``skipReason`` saying why.

With ``max_staleness`` > 0 the samples of update ``u`` are drawn ahead, while the updates
before it train, from the adapter after update ``u − 1 − max_staleness``
(:mod:`akka_optimize.engine.rl.offpolicy`). On several ranks each rank samples and trains
whole groups of the update (:mod:`akka_optimize.engine.rl.ranks`).

This module owns the run (:func:`run_rl`: its updates, saves, events and resume); one
update is :mod:`akka_optimize.engine.rl.step`, its sampling :mod:`akka_optimize.engine.rollout`
and the loop's records :mod:`akka_optimize.engine.rl.settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..distributed import any_rank
from ..errors import EngineError
from ..phases import end_phase, training_phase
from ..rollout import rollout_passes as rollout_passes
from ..rollout import sample_group as sample_group
from ..rollout_vllm import vllm_rollout
from ..sanity import start_warnings
from .gap import ONE_DEVICE, Reduce
from .offpolicy import RolloutSide
from .ranks import RankReduce, check_rank_session, rank_groups
from .settings import RLPrompt as RLPrompt
from .settings import RLSettings as RLSettings
from .settings import Sample as Sample
from .settings import kv_bytes_per_token as kv_bytes_per_token
from .settings import rows_that_fit as rows_that_fit
from .step import draw
from .step import group_advantages as group_advantages
from .step import rl_update as rl_update


@dataclass
class RLResult:
    """How a call to :func:`run_rl` ended.

    Attributes:
        step / total_steps: the last completed update and the run's updates.
        stopped: it stopped early after saving (pause or cancel).
        final_loss / mean_loss: the policy loss the last update logged (0 for an update
            that trained nothing, whose metrics say why: ``skipReason``), and the mean over
            every update (seeds/000 "finalLoss is the last loss the training loop logged").
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
    max_seq_length: int | None = None,
    rollout_backend: Callable[..., Any] | None = None,
) -> RLResult:
    """A reinforcement run: ``steps`` updates of :func:`rl_update`, with the saves, events
    and resume of a supervised run (:func:`akka_optimize.engine.sft.run_sft`).

    Emits ``metrics`` (per update: :func:`rl_update`'s metrics, ``step`` first),
    ``samples`` (per update: the first :data:`SHOWN_SAMPLES` samples' ``row`` — the
    prompt's 0-based index in ``prompts`` —, ``group``, ``tokens``, ``reward``,
    ``advantage``, ``error``, the sampler's ``logprobs`` and the ``weightVersion`` that
    drew it), ``save`` (every ``cfg.save_every_steps`` updates, when stopping,
    and at the end; ``epoch`` None) and ``phase`` events.

    ``rollout_backend`` picks the sampler (default :func:`.rollout_vllm.vllm_rollout`;
    :class:`_Rollouts`); ``max_seq_length`` bounds vLLM's prompt plus completion.

    Raises:
        EngineError: no prompts, a resume whose saved settings differ, or the session's
            own errors.
    """
    if not prompts:
        raise EngineError("the reinforcement run has no prompts.", code="no_rows")
    session, log = _start_rl_session(
        cfg, model_dir, state_dir, len(prompts), steps, emit, resume_step, init_adapter
    )
    result = RLResult(0, steps, adapted_modules=session.adapted_modules)
    reward = None
    settings, reduce = _on_ranks(session, settings, prompts_per_step)
    choose = rollout_backend or vllm_rollout
    backend = choose(session, settings, model_dir, state_dir / "rollout", emit, max_seq_length)
    ahead = (lambda u: update_prompts(prompts, u, prompts_per_step), stop_ids, steps)
    rollouts = _Rollouts(session, settings, backend, ahead)
    try:
        for update in range(session.step + 1, steps + 1):
            batch = update_prompts(prompts, update, prompts_per_step)
            mine = rank_groups(len(batch), session.rank, session.world)
            batch = [batch[g] for g in mine]
            drawn = rollouts.take(session, batch, settings, update, mine)
            metrics, samples = rl_update(
                session, batch, score, settings, stop_ids, drawn=drawn, reduce=reduce
            )
            rollouts.publish(session, last=update == steps)
            emit({"type": "metrics", **metrics})
            emit(samples_event(samples, update, prompts_per_step, len(prompts), mine))
            reward = metrics["rewardMean"]
            if log["first_reward"] is None:
                log["first_reward"] = reward
            # seeds/000: finalLoss is the last loss the loop logged (an update that trained
            # nothing logs 0 and says why), meanLoss the mean over the run's updates.
            log["loss_sum"] += float(metrics["loss"])
            log["count"] += 1
            log["last"] = float(metrics["loss"])
            stopping = update < steps and _stop(session, should_stop)
            every = cfg.save_every_steps and update % cfg.save_every_steps == 0
            if update == steps or every or stopping:
                log["last_reward"] = reward
                result.adapter_dir = _save_rl(
                    session, cfg, model_dir, state_dir, len(prompts), log, emit
                )
            if stopping:
                result.stopped = True
                break
    finally:
        rollouts.close()
    return _finish(result, session.step, log, reward, emit)


class _Rollouts:
    """Who draws each update's samples: on several ranks each rank now, with its groups'
    generators; with ``maxStaleness`` > 0 the rollout side's thread, ahead
    (:class:`~.rl_async.RolloutSide`, on vLLM when ``backend`` is one); else on-policy
    now, through ``backend`` (vLLM, :mod:`.rollout_vllm`) or, without one, the session's
    own lean sampler (``take`` gives None: :func:`rl_update` draws)."""

    def __init__(self, session: Any, settings: RLSettings, backend: Any, ahead: tuple) -> None:
        self.backend, self.side, self.stop_ids = backend, None, ahead[1]
        if settings.max_staleness > 0 and session.step < ahead[2]:  # samples drawn ahead
            self.side = RolloutSide(session, settings, *ahead, backend=backend)
        elif backend is not None:
            backend.publish(session)

    def take(
        self, session: Any, batch: list[RLPrompt], settings: RLSettings, update: int, mine: list
    ) -> tuple[list[Sample], float] | None:
        """The samples of ``update`` (this rank's groups ``mine`` of it) and their seconds."""
        if session.world > 1:
            return draw(session, batch, settings, self.stop_ids, update, session.step, mine)
        if self.side is not None:
            return self.side.take(update)
        if self.backend is not None:
            return self.backend.draw(batch, settings, self.stop_ids, update, session.step)
        return None

    def publish(self, session: Any, last: bool) -> None:
        """Hand the new adapter to the sampler, from the main thread after the optimizer
        step (rule 20); nothing after the ``last`` update on-policy (nothing samples)."""
        if self.side is not None:
            self.side.publish(session)
        elif self.backend is not None and not last:
            self.backend.publish(session)

    def close(self) -> None:
        """Stop the rollout side's thread, if any."""
        if self.side is not None:
            self.side.close()


def _finish(
    result: RLResult, step: int, log: dict[str, Any], reward: float | None, emit: Any
) -> RLResult:
    """Fill ``result`` from the loop's ``log`` and emit the end phase."""

    result.step = step
    result.final_loss = log["last"]
    result.mean_loss = log["loss_sum"] / log["count"] if log["count"] else None
    result.first_reward = log["first_reward"]
    result.final_reward = reward if reward is not None else log.get("last_reward")
    emit(end_phase(result))
    return result


def _stop(session: Any, should_stop: Callable[[], bool] | None) -> bool:
    """Whether the run stops after this update (on several ranks: when any rank heard a
    pause or cancel, so every rank stops at the same update)."""
    stop = bool(should_stop and should_stop())
    return any_rank(stop) if session.world > 1 else stop


def _on_ranks(session: Any, settings: RLSettings, prompts_per_step: int) -> tuple[Any, Reduce]:
    """The loop's settings and metric reduction on the session's ranks: on several, each
    group draws from its own generator and every sum is over the ranks
    (:mod:`akka_optimize.engine.rl.ranks`).

    Raises:
        EngineError: what :func:`check_rank_session` refuses, or fewer prompts per update
            than ranks (a rank would have no group).
    """
    if session.world == 1:
        return settings, ONE_DEVICE
    check_rank_session(session, settings.max_staleness)
    if prompts_per_step < session.world:
        raise EngineError(
            f"rlHyperparams.promptsPerStep {prompts_per_step} is below the "
            f"{session.world} devices: each rank trains whole groups, at least one.",
            field="config.rlHyperparams.promptsPerStep",
        )
    return replace(settings, group_generators=True), RankReduce()


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
    from ..session.training import TrainingSession  # lazy: safetensors
    from ..snapshots import state_path  # lazy: safetensors

    emit({"type": "phase", "phase": "loading_model", "step": resume_step or 0})
    session = TrainingSession(model_dir, cfg, total_updates=steps)
    for warning in start_warnings(session.device.type, session.dtype):
        emit(warning)
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
    samples: list[Sample],
    update: int,
    prompts_per_step: int,
    rows: int,
    groups: list[int] | None = None,
) -> dict[str, Any]:
    """The ``samples`` event of one update: its first :data:`SHOWN_SAMPLES` samples, each
    with ``row`` (the prompt's 0-based index in the run's prompts), ``group``, ``tokens``,
    ``reward``, ``advantage``, ``error``, the sampler's ``logprobs`` (nats, one per token)
    and the adapter ``weightVersion`` that drew it. ``groups``: the update's group index
    of each of the samples' groups (a rank's share; default the same index)."""
    at = groups if groups is not None else list(range(prompts_per_step))
    return {
        "type": "samples",
        "step": update,
        "samples": [
            {
                "row": ((update - 1) * prompts_per_step + at[s.group]) % rows,
                "group": at[s.group],
                "tokens": s.tokens,
                "reward": s.reward,
                "advantage": s.advantage,
                "error": s.error,
                "logprobs": s.logprobs,
                "weightVersion": s.weight_version,
            }
            for s in samples[:SHOWN_SAMPLES]
        ],
    }


SHOWN_SAMPLES = 8
"""Samples of each update kept for ``runs samples`` (the first ones, in prompt order)."""


def _save_rl(
    session: Any, cfg: Any, model_dir: Path, state_dir: Path, prompts: int, log: dict, emit: Any
) -> Path:
    from ..snapshots import save_snapshot  # lazy: safetensors

    # the cursor's "rows" (here: prompts) is what a resume checks, as a supervised save's
    return save_snapshot(session, cfg, model_dir, state_dir, None, False, prompts, log, emit)
