"""What a worker does for a reinforcement run: prompts → reward → the engine's loop.

The ``rl`` kind's worker function (:mod:`.rl_kind`). Order: rows → prompts (each row
without its last assistant message, rendered with the chat template's generation prompt;
the reference answer stays with the reward as ``ground_truth``) → the reward
(:mod:`.rewards`) → :func:`akka_optimize.engine.rl.loop.run_rl`, with the supervised worker's
saves, resume and warm start (:mod:`akka_optimize.jobs.training`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from ..evals.rows import content_text, eval_rows
from ..evals.worker import prompt_ids, sandbox_limits
from ..jobs.spec import JobSpec
from ..jobs.training import (
    first_system_message,
    result_fields,
    spec_version,
    starting_state,
    stop_event,
    uploading,
)
from ..serving.engine import stop_token_ids
from ..store import BlobStore
from .rewards import Rewards


def fitting_prompts(
    tokenizer: Any,
    examples: list[Any],
    max_seq_length: int,
    max_new_tokens: int,
    on_too_long: str,
    events: Any,
) -> tuple[list[Any], list[Any]]:
    """The prompts whose tokens plus ``max_new_tokens`` fit ``config.maxSeqLength``, and
    their rows; the others are dropped and listed (``config.data.onTooLong: drop``, sent as
    the run's ``data`` report) or refuse the run (``refuse``), as a supervised run's rows.

    Raises:
        InvalidRequest: (``config.maxSeqLength``) a prompt too long under ``refuse``, or
            none left.
    """
    from ..engine.rl.loop import RLPrompt  # lazy: torch

    kept, rows, too_long = [], [], []
    for ex in examples:
        ids = prompt_ids(tokenizer, ex)
        if len(ids) + max_new_tokens > max_seq_length:
            too_long.append((ex.index + 1, len(ids)))
            continue
        kept.append(RLPrompt(ids, ex.ground_truth, source=ex))
        rows.append(ex)
    if too_long and (on_too_long == "refuse" or not kept):
        listed = ", ".join(f"row {r} ({n} tokens)" for r, n in too_long[:10])
        raise InvalidRequest(
            f"{len(too_long)} prompts leave no room for maxNewTokens {max_new_tokens} within "
            f"maxSeqLength {max_seq_length}: {listed}; raise config.maxSeqLength or lower "
            "config.rlHyperparams.maxNewTokens",
            field="config.maxSeqLength",
        )
    report = {
        "rows": len(examples),
        "examples": len(kept),
        "max_seq_length": max_seq_length,
        "dropped_too_long": [r for r, _ in too_long],
        "prompt_tokens": {"max": max(len(p.prompt_ids) for p in kept)},
    }
    events.send({"type": "data", "train": report, "validation": None})
    return kept, rows


def train_rl(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """Train one attempt of a reinforcement run; returns the final event (``completed``,
    ``paused`` or ``cancelled``). ``spec.extra`` holds ``rl`` (the loop's fields),
    ``grader`` (the pinned reward), ``limits`` and ``hidden`` (a bundle's sandbox). On
    several devices every rank runs it (each scores its own groups; rank 0 sends the
    events and writes the saves, :mod:`akka_optimize.engine.rl.ranks`)."""
    from ..engine import distributed  # lazy: torch

    distributed.init_ranks(int(spec.engine.get("ranks", 1)), spec.device)
    try:
        return _train_rl(spec, store, events, work)
    finally:
        distributed.finish_ranks()


def _train_rl(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from ..engine.config import EngineConfig  # lazy: torch
    from ..engine.rl.loop import run_rl  # lazy: torch
    from ..registry import download_bundle, load_dataset_rows  # lazy: sqlalchemy

    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the dataset"})
    dataset = spec_version("dataset", spec.dataset)
    rows = load_dataset_rows(store, dataset)
    examples = eval_rows(rows, dataset.pinned, f"{dataset.namespace}/{dataset.name}")
    tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
    rl = spec.extra["rl"]
    prompts, examples = fitting_prompts(
        tokenizer, examples, spec.max_seq_length, int(rl["maxNewTokens"]), spec.on_too_long, events
    )
    stops = stop_token_ids(tokenizer)
    grader = spec.extra["grader"]
    bundle_dir = None
    if grader["kind"] == "bundle":
        bundle_dir = download_bundle(
            store, spec_version("bundle", grader["bundle"]), work / "bundle"
        )
    cfg = EngineConfig(**spec.engine)
    settings = rl_settings(spec)
    state_dir = work / "state"
    resume_step, warm_dir = starting_state(spec, store, work, state_dir)
    speed = {"tokens": 0, "seconds": 0.0}
    send = uploading(spec, store, events, speed)

    def emit(event: dict[str, Any]) -> None:
        if event.get("type") == "samples":  # text for `runs samples`
            _sample_texts(event, examples, tokenizer)
        send(event)

    def decode(tokens: list[int]) -> str:
        return tokenizer.decode(tokens, skip_special_tokens=True)

    events.send({"type": "phase", "phase": "RUNNING", "detail": "sampling and training"})
    with Rewards(
        grader,
        decode,
        events,
        bundle_dir=bundle_dir,
        limits=sandbox_limits(spec.extra),
        hidden=[Path(p) for p in spec.extra.get("hidden", [])],
    ) as rewards:
        result = run_rl(
            cfg,
            settings,
            Path(spec.model_dir),
            prompts,
            steps=int(rl["steps"]),
            prompts_per_step=int(rl["promptsPerStep"]),
            score=rewards,
            stop_ids=stops,
            state_dir=state_dir,
            emit=emit,
            resume_step=resume_step,
            init_adapter=warm_dir,
            should_stop=lambda: events.control in ("pause", "cancel"),
            max_seq_length=spec.max_seq_length,
        )
    stopped = stop_event(events, result)
    if stopped is not None:
        return stopped
    return {"type": "completed", "result": _result(result, grader, speed["tokens"], rows)}


def rl_settings(spec: JobSpec) -> Any:
    """The rollout loop's :class:`akka_optimize.engine.rl.loop.RLSettings` from a job spec:
    ``spec.extra["rl"]`` (samples per prompt, new tokens, temperature, loss, its
    aggregation, the advantages' normalisation, the rollout correction, the staleness
    bound, seed) and the
    stated ``execution.rollout`` settings in ``spec.extra["rollout"]``."""
    from ..engine.rl.loop import RLSettings  # lazy: torch

    rl = spec.extra["rl"]
    known = {  # fields a spec written before they existed lacks: their defaults
        "lossAggregation": ("aggregation", str),
        "advantageNormalization": ("advantage_norm", str),
        "rolloutCorrection": ("correction", str),
        "rolloutCorrectionCap": ("correction_cap", float),
        "maxStaleness": ("max_staleness", int),
    }
    return RLSettings(
        samples_per_prompt=int(rl["samplesPerPrompt"]),
        max_new_tokens=int(rl["maxNewTokens"]),
        temperature=float(rl["temperature"]),
        loss_fn=str(rl["lossFn"]),
        seed=int(rl["seed"]),
        **{name: kind(rl[k]) for k, (name, kind) in known.items() if rl.get(k) is not None},
        **{k: v for k, v in (spec.extra.get("rollout") or {}).items() if v is not None},
    )


def _sample_texts(event: dict[str, Any], examples: list[Any], tokenizer: Any) -> None:
    """Give a ``samples`` event the text ``runs samples`` shows: each sample's last user
    message as ``prompt`` and its decoded ``tokens`` (removed) as ``completion``."""

    for s in event["samples"]:
        ex = examples[s["row"]]
        users = [m for m in ex.prompt if m.get("role") == "user"]
        s["prompt"] = content_text(users[-1].get("content")) if users else ""
        s["completion"] = tokenizer.decode(s.pop("tokens"), skip_special_tokens=True)


def _result(result: Any, grader: dict[str, Any], tokens: int, rows: list[dict]) -> dict:
    """A finished attempt's result: the supervised result fields, the reward's spec, the
    first and final update's mean reward, the adapted modules, the tokens trained and the
    dataset's instructions (its first system message)."""

    return {
        **result_fields(result),
        "reward": grader.get("spec"),
        "rewardStart": result.first_reward,
        "rewardFinal": result.final_reward,
        "adaptedModules": result.adapted_modules,
        "totalTokens": tokens,
        "instructions": first_system_message(rows),
    }
