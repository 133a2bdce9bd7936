"""Reinforcement runs (``config.method: rl``) as a kind of job (issue 18; seeds/000
"Training parameters"; FEATURES F091).

The kind lives beside the evaluations because its reward is theirs (:mod:`.rewards`):
``jobs/`` schedules it like any run and never imports it (DESIGN.md "Layout": ``evals``
may import ``jobs``, not the other way). At acceptance (:func:`accept`, called by the
dry run and the start alike) the reward is resolved and pinned — a bundle's module and
function checked, a judge's base model ready and its instructions settled — and every
dataset row must give a prompt and a gold answer (the reward's ``ground_truth``; the
reference answer never reaches the prompt, DATA-AND-TRAINING-RULES.md rule 21). A refusal
names ``config.rlHyperparams.reward`` or ``config.dataset`` and stores nothing.

Each update's metrics land in ``runs metrics`` like a supervised run's; each update's first
samples (prompt, completion, reward, advantage) in ``runs samples``; saves, pause, resume,
cancel and the registered model work as for a supervised run. The model is registered
with ``method: rl``, its reward and the mean reward of the first and last update.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt, RunMetric
from ..deployment import Deployment
from ..errors import AkkaError, InvalidRequest
from ..evals.rows import eval_rows
from ..jobs.context import JobContext
from ..jobs.kinds import JobKind, Launch
from ..jobs.mapping import build_spec as supervised_spec
from ..jobs.results import complete
from ..jobs.saves import record_save
from ..jobs.spec import JobSpec
from ..plan.resolved_schema import ResolvedRunPlan, typed_plan
from ..registry import load_dataset_rows
from ..registry import resolve as registry_resolve
from .rewards import BUILTIN_MATH

REWARD_FIELD = "config.rlHyperparams.reward"

NOT_USED = frozenset({"config.data.validationDataset", "config.data.use_dynamic_bsz"})
"""Plan settings a reinforcement run refuses when stated (it would not use them)."""

NOT_USED_PREFIXES = ("config.engineSettings.",)
"""Groups a reinforcement run refuses when any of their fields is stated (except
:data:`ROLLOUT_SETTINGS`): the rollout engine's CUDA graphs (the loop samples with the
training session itself, without graphs) and the engine settings of runs on several
devices. ``execution.rollout.memoryShare`` takes effect: it bounds the sampler's KV cache
(:func:`kv_cache_bytes`)."""

ROLLOUT_SETTINGS = {
    "rollout.max_num_seqs": "max_num_seqs",
    "rollout.max_num_batched_tokens": "max_num_batched_tokens",
    "rollout.enable_prefix_caching": "prefix_caching",
}
"""Rollout engine settings the loop's sampler honours (:class:`akka_optimize.engine.rl.loop.
RLSettings`), by ``config.engineSettings`` key."""

RL_LOOP_FIELDS = (
    "steps",
    "promptsPerStep",
    "samplesPerPrompt",
    "maxNewTokens",
    "temperature",
    "lossFn",
    "lossAggregation",
    "advantageNormalization",
    "rolloutCorrection",
    "rolloutCorrectionCap",
    "maxStaleness",
    "seed",
)
"""The ``rlHyperparams`` fields the worker's loop reads (``spec.extra["rl"]``)."""

_FIELDS = {"grader": REWARD_FIELD, "graderInstructions": REWARD_FIELD, "dataset": "config.dataset"}


def _renamed(exc: AkkaError) -> AkkaError:
    """``exc`` with an evaluation's field names (``grader``, ``dataset``) as the plan's."""
    exc.field = _FIELDS.get(exc.field or "", exc.field)
    return exc


def accept(ctx: JobContext, s: Session, f: dict[str, Any]) -> dict[str, Any]:
    """Check and pin a reinforcement plan's reward and rows (the kind's ``accept``).

    Returns:
        ``{"grader", "graderInstructions", "instructionsSource"}`` to keep with the run.

    Raises:
        InvalidRequest / NotFound: (``config.rlHyperparams.reward``) a reward that does not
            resolve or whose judge cannot serve; (``config.dataset``) a row without a
            prompt or a gold answer, named.
    """
    from ..evals.kind import check_scoring  # lazy: httpx

    for path in f["resolved"].get("stated") or []:
        used = path.removeprefix("config.engineSettings.") in ROLLOUT_SETTINGS
        if path in NOT_USED or (path.startswith(NOT_USED_PREFIXES) and not used):
            raise InvalidRequest(
                f"{path}: a reinforcement run does not use it yet (it samples with the "
                "training session's own weights on its device, validates nothing and "
                "trains one sequence per sample); leave it out.",
                field=path,
                code="not_available",
            )
    rl = (f["resolved"].get("config") or {}).get("rlHyperparams") or {}
    reward = str(rl.get("reward") or BUILTIN_MATH)
    project = f["project"]

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return registry_resolve(s, kind, ref, project, field=_FIELDS.get(field, field))

    try:
        if reward == BUILTIN_MATH:
            ds = resolve("dataset", f["dataset"], field="dataset")
            rows = load_dataset_rows(ctx.store, ds)
            if not rows:
                raise InvalidRequest(f"Dataset {ds.pinned} has no rows.", field="dataset")
            eval_rows(rows, ds.pinned, f"{ds.namespace}/{ds.name}")
            return {
                "grader": {"spec": BUILTIN_MATH, "kind": "builtin"},
                "graderInstructions": None,
                "instructionsSource": None,
            }
        # the plan's rules refused any other form (plan/rules/check.py)
        sc = check_scoring(ctx, s, reward, None, f["dataset"], resolve)
    except AkkaError as exc:
        raise _renamed(exc) from None
    return {
        "grader": sc.grader(),
        "graderInstructions": sc.instructions,
        "instructionsSource": sc.source,
    }


def kv_cache_bytes(dep: Deployment, plan: ResolvedRunPlan) -> int | None:
    """The sampler's KV-cache budget: ``execution.rollout.memoryShare`` of one device of the
    run's profile (``deviceMemoryGiB``; on cpu, ``hostMemoryGiB``), in bytes; None when the
    run has no rollout share or the deployment no longer declares its profile or memory."""
    ex = plan.execution
    profile = dep.profile(ex.deviceProfile)
    if ex.rollout is None or profile is None:
        return None
    gib = profile.deviceMemoryGiB if profile.kind == "cuda" else profile.hostMemoryGiB
    return int(float(ex.rollout.memoryShare) * float(gib or 0) * 1024**3) if gib else None


def memory_share(plan: ResolvedRunPlan) -> float | None:
    """``execution.rollout.memoryShare`` (vLLM's ``gpu_memory_utilization`` when the
    rollouts run on vLLM, :mod:`akka_optimize.engine.rollout_vllm`); None when unset."""
    ex = plan.execution
    return float(ex.rollout.memoryShare) if ex.rollout is not None else None


def loop_settings(plan: ResolvedRunPlan, dep: Deployment) -> dict[str, Any]:
    """``spec.extra``'s ``rl`` (the loop's fields, :data:`RL_LOOP_FIELDS`) and ``rollout``
    (the sampler's settings by :data:`ROLLOUT_SETTINGS` name, ``kv_cache_bytes``,
    ``memory_share``) of a
    reinforcement run's resolved plan; every rollout setting is resolved for the loop."""
    rl = plan.config.rlHyperparams
    if rl is None:
        raise InvalidRequest(
            "A reinforcement run's resolved plan has no config.rlHyperparams.",
            field="config.rlHyperparams",
            code="resolved_plan_invalid",
        )
    es = plan.config.engineSettings
    return {
        "rl": rl.model_dump(include=set(RL_LOOP_FIELDS)),
        "rollout": {
            **{name: es[key] for key, name in ROLLOUT_SETTINGS.items()},
            "kv_cache_bytes": kv_cache_bytes(dep, plan),
            "memory_share": memory_share(plan),
        },
    }


def build_spec(launch: Launch) -> JobSpec:
    """A supervised run's spec (engine settings from ``rlHyperparams``), plus the loop's
    settings, the pinned reward and the grader sandbox's limits in ``extra``."""
    spec = supervised_spec(launch)
    r = launch.run.resolved
    plan = typed_plan(r)
    g = dict(r.get("grader") or {"spec": BUILTIN_MATH, "kind": "builtin"})
    if g.get("judge"):
        g.update(kind="model", instructions=r.get("graderInstructions"))
    elif g.get("bundle"):
        g.update(
            kind="bundle", bundle=registry_resolve(launch.session, "bundle", g["bundle"]).to_dict()
        )
    dep = launch.ctx.deployment()
    lim = dep.graders
    spec.extra.update(
        **loop_settings(plan, dep),
        grader=g,
        limits={
            "cpu_seconds": lim.cpuSeconds,
            "wall_seconds": lim.wallSeconds,
            "memory_bytes": lim.memoryMiB * 1024**2,
            "workers": lim.workers,
        },
        hidden=[str(launch.ctx.settings.home)],
    )
    return spec


def record_samples(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]
) -> None:
    """Keep an update's shown samples (``runs samples``) as a measurement of kind
    ``samples``."""
    s.add(
        RunMetric(
            run_id=run.id,
            attempt=att.number,
            kind="samples",
            step=int(ev.get("step") or 0),
            values={"samples": list(ev.get("samples") or [])},
        )
    )


REINFORCEMENT = JobKind(
    name="rl",
    worker="akka_optimize.reinforcement.worker:train_rl",
    build_spec=build_spec,
    events={"save": record_save, "completed": complete, "samples": record_samples},
    accept=accept,
)
"""The reinforcement kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""
