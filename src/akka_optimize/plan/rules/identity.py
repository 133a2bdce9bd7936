"""Plan rules on who and what a plan is: project, base model and model name, the
hyperparameter groups of the loop that runs, and what a smoke run refuses.

Sources: seeds/000 "Smaller changes" (a missing project names the field; ``smoke`` and
``smokeCheck``, F076); seeds/001 "Project names".
"""

from __future__ import annotations

from typing import Any

from ...errors import AkkaError
from ...refs import validate_name
from ..environment import PlanEnvironment
from ..refusals import Refusals
from ..schema.run import RunPlan
from .facts import Facts


def check_identity(plan: RunPlan, env: PlanEnvironment, facts: Facts, out: Refusals) -> None:
    """Project, base model and model name."""

    try:
        project = validate_name(plan.project, "project")
    except AkkaError as exc:
        out.add("project", exc.message, plan.project)
    else:
        if not env.project_exists(project):
            out.add(
                "project",
                f"project {project!r} does not exist; create it with "
                f"`training projects create {project}`.",
                plan.project,
            )
    if facts.entry is None:
        out.add(
            "baseModel",
            f"baseModel {plan.baseModel!r} is not in this deployment's catalog; "
            "`training base-models list --all` shows the models it allows.",
            plan.baseModel,
        )
    try:
        facts.model_name = validate_name(facts.model_name, "modelName")
    except AkkaError as exc:
        hint = "" if plan.modelName else " (derived from baseModel; set modelName)"
        out.add("modelName", exc.message + hint, facts.model_name)


def check_loop_groups(plan: RunPlan, facts: Facts, out: Refusals) -> None:
    """A plan states the groups of the loop that runs, not the other loop's."""
    cfg = plan.config
    if facts.method != "rl" and cfg.rlHyperparams is not None:
        out.add(
            "config.rlHyperparams",
            "config.rlHyperparams applies to a reinforcement run (method rl); a "
            + (
                "preference run reads config.dpoHyperparams."
                if facts.method == "dpo"
                else "supervised run reads config.hyperparams."
            ),
        )
    if facts.method == "rl":
        if cfg.hyperparams is not None:
            out.add(
                "config.hyperparams",
                "config.hyperparams applies to a supervised run (method sft); a reinforcement "
                "run reads config.rlHyperparams (lora, optimizer, scheduler and its loop fields).",
            )
        if cfg.loss is not None:
            out.add("config.loss", "config.loss applies to a supervised run (method sft).")
        if cfg.data is not None and cfg.data.packing is not None:
            out.add("config.data.packing", "config.data.packing applies to a supervised run.")
        if plan.execution is not None and plan.execution.saveEachEpoch is not None:
            out.add(
                "execution.saveEachEpoch",
                "execution.saveEachEpoch applies to a supervised run; a reinforcement run has "
                "no epochs.",
            )
    if facts.method == "dpo":
        check_preference_groups(plan, out)
    elif cfg.dpoHyperparams is not None:
        out.add(
            "config.dpoHyperparams",
            f"config.dpoHyperparams applies to a preference run (method dpo); a "
            f"{'reinforcement' if facts.method == 'rl' else 'supervised'} run reads "
            f"config.{'rlHyperparams' if facts.method == 'rl' else 'hyperparams'}.",
        )
    reward = cfg.rlHyperparams.reward if cfg.rlHyperparams else None
    if reward is not None and not (
        reward == "builtin:math"
        or (reward.startswith("bundle:") and "#" in reward)
        or reward.startswith("model:")
    ):
        out.add(
            "config.rlHyperparams.reward",
            f"config.rlHyperparams.reward {reward!r} is not a grader: use "
            "bundle:REFERENCE#MODULE[:FUNCTION], model:REFERENCE or builtin:math.",
            reward,
        )


# What a smoke run decides itself (engine/smoke.py): a plan stating one of these would
# have it ignored, so the plan is refused naming it.
SMOKE_IGNORED = (
    ("config.hyperparams.training.epochs",
     "a smoke run trains its slice until it reproduces it, at most smokeCheck.maxSteps updates"),
    ("config.hyperparams.training.maxSteps", "a smoke run stops at smokeCheck.maxSteps"),
    ("config.data.validationDataset", "a smoke run reads its own training slice"),
    ("modelName", "a smoke run registers no model (`training snapshots register` registers "
     "its adapter)"),
    ("branchFrom", "a smoke run checks a plan from the base model or its warmStartModelId"),
    ("execution.saveEachEpoch", "a smoke run's epochs are passes over its slice"),
)  # fmt: skip


def _stated(dumped: dict[str, Any], path: str) -> Any:
    node: Any = dumped
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def check_smoke(plan: RunPlan, facts: Facts, out: Refusals) -> None:
    """``smoke`` and ``smokeCheck`` (seeds/000 "Smaller changes", F076): the smoke check
    is of supervised runs, ``smokeCheck`` needs ``smoke: true``, and a smoke run refuses
    the fields it would ignore (:data:`SMOKE_IGNORED`)."""
    if plan.smokeCheck is not None and not plan.smoke:
        out.add(
            "smokeCheck",
            "smokeCheck sets a smoke run's slice and threshold; set smoke: true or leave it out.",
        )
    if not plan.smoke:
        return
    if facts.method != "sft":
        out.add(
            "smoke",
            f"smoke: the smoke check is of supervised runs (config.method sft); a "
            f"{facts.method} run cannot be one. Leave smoke out.",
            True,
        )
    dumped = plan.model_dump(exclude_none=True)
    for path, why in SMOKE_IGNORED:
        value = _stated(dumped, path)
        if value is not None:
            out.add(path, f"{path}: {why}; leave it out of a smoke run.", value)


PREFERENCE_NOT_USED = (
    ("config.hyperparams", "a preference run reads config.dpoHyperparams (lora, optimizer, "
     "scheduler and its loop fields)"),
    ("config.loss", "a preference run scores each pair's two answers only (the last "
     "assistant message of each side)"),
    ("config.data.packing", "a preference run packs each pair's two answers into one pass"),
    ("config.data.use_dynamic_bsz", "a preference run packs microBatchPerGpu whole pairs "
     "per pass"),
)  # fmt: skip
"""Plan fields a preference run refuses when stated, with why (it would not use them)."""


def check_preference_groups(plan: RunPlan, out: Refusals) -> None:
    """A preference run's own rules (issue 50; seeds/004 §1.4): the fields it would not
    use are refused (:data:`PREFERENCE_NOT_USED`); ``lossWeights`` holds one weight per
    loss type; ``labelSmoothing`` applies to DPO only and is refused with ``ipo``, naming
    both fields."""
    cfg = plan.config
    stated = {
        "config.hyperparams": cfg.hyperparams,
        "config.loss": cfg.loss,
        "config.data.packing": cfg.data.packing if cfg.data else None,
        "config.data.use_dynamic_bsz": cfg.data.use_dynamic_bsz if cfg.data else None,
    }
    for path, why in PREFERENCE_NOT_USED:
        if stated[path] is not None:
            out.add(path, f"{path}: {why}; leave it out.")
    hp = cfg.dpoHyperparams
    if hp is None:
        return
    types = hp.lossTypes or ["sigmoid"]
    if hp.lossWeights is not None and len(hp.lossWeights) != len(types):
        out.add(
            "config.dpoHyperparams.lossWeights",
            f"config.dpoHyperparams.lossWeights has {len(hp.lossWeights)} weights for "
            f"{len(types)} loss types ({', '.join(types)}); give one weight per entry of "
            "config.dpoHyperparams.lossTypes.",
            hp.lossWeights,
        )
    for i, w in enumerate(hp.lossWeights or []):
        if not 0 <= w <= 1000:
            path = f"config.dpoHyperparams.lossWeights[{i}]"
            out.add(path, f"{path} {w:g} is outside [0, 1000].", w, [0, 1000])
    if len(set(types)) != len(types):
        out.add(
            "config.dpoHyperparams.lossTypes",
            f"config.dpoHyperparams.lossTypes names a loss twice ({', '.join(types)}); "
            "weigh it with lossWeights instead.",
            types,
        )
    if hp.labelSmoothing and "ipo" in types:
        out.add(
            "config.dpoHyperparams.labelSmoothing",
            f"config.dpoHyperparams.labelSmoothing {hp.labelSmoothing:g} applies to the DPO "
            "(sigmoid) loss only and is incompatible with ipo in "
            "config.dpoHyperparams.lossTypes (seeds/004 §1.4); set it to 0 or leave ipo out.",
            hp.labelSmoothing,
        )
