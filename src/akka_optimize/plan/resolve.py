"""Resolution: parse a plan, fill the defaults of the loop that runs, check every ceiling,
pin references, and hash the result.

DESIGN.md "One picture": a plan is parsed (schema, unknown fields refused), resolved
(defaults for the loop that runs, registry references pinned to exact versions,
ceilings checked against the base model's catalog entry and the deployment) before
anything is queued. Every refusal names the field by its full path, and all of them are
reported together (:class:`~akka_optimize.plan.refusals.PlanRefused`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ..deployment import DeviceProfile
from ..engine_settings import BY_KEY, SETTINGS
from ..errors import AkkaError
from . import defaults as D
from .environment import CatalogEntryView, PlanEnvironment
from .frozen import keep_frozen
from .hashing import config_hash
from .refusals import PlanRefused, Refusals, from_validation_error
from .rules.check import Facts, check_all
from .schema.run import RunPlan


@dataclass
class ResolvedPlan:
    """A plan with every default filled, references pinned and its configuration hash.

    Attributes:
        plan: the full resolved descriptor (JSON): ``kind``, ``project``, ``baseModel``,
            ``modelName`` (``project/name``), ``submissionId``, ``smoke``,
            ``warmStartModelId``, ``branchFrom``, ``config`` (``hyperparams`` for ``sft`` or
            ``rlHyperparams`` for ``rl``, ``dpoHyperparams`` for ``dpo``, every field filled; ``engineSettings`` holds every
            setting of the loop, empty for a supervised run on one device) and
            ``execution`` (``memory``/``rollout`` None where they do not apply).
        raw: the plan as submitted.
        stated: dotted paths the plan stated (``config.engineSettings.head.chunk_tokens``).
        pinned: path → pinned reference (``config.dataset`` → ``triage/train:v1@sha256:…``).
        config_hash: SHA-256 hex of the resolved training configuration
            (:func:`akka_optimize.plan.hashing.config_hash`).
        device_profile: the device profile the run trains on.
        catalog_entry: the base model's catalog entry.
    """

    plan: dict[str, Any]
    raw: dict[str, Any]
    stated: list[str]
    pinned: dict[str, str]
    config_hash: str
    device_profile: DeviceProfile
    catalog_entry: CatalogEntryView | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        """``sft``, ``rl`` or ``dpo``."""
        return self.plan["config"]["method"]

    @property
    def project(self) -> str:
        """The training project's name (lower case)."""
        return self.plan["project"]

    @property
    def gpus(self) -> int:
        """Devices the run claims on one node."""
        return self.plan["execution"]["gpus"]

    @property
    def hyperparams(self) -> dict[str, Any]:
        """The hyperparameter groups of the loop that runs."""
        return self.plan["config"][D.HYPERPARAMS_KEY[self.method]]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored with a run, returned by the dry run)."""
        return {
            "plan": self.plan,
            "stated": self.stated,
            "pinned": self.pinned,
            "configHash": self.config_hash,
            "deviceProfile": self.device_profile.name,
        }


def parse_plan(raw: Any, out: Refusals) -> RunPlan | None:
    """Validate ``raw`` against :class:`RunPlan`; add a refusal per schema error."""
    try:
        return RunPlan.model_validate(raw)
    except ValidationError as exc:
        from_validation_error(exc, out)
        return None


def stated_paths(plan: RunPlan) -> list[str]:
    """Dotted paths of every leaf the plan states (null counts as not stated)."""
    out: list[str] = []

    def walk(prefix: str, v: Any, is_engine: bool = False) -> None:
        if isinstance(v, dict) and not is_engine and v:
            for k, x in v.items():
                walk(
                    f"{prefix}.{k}" if prefix else k,
                    x,
                    prefix == "config" and k == "engineSettings",
                )
        elif isinstance(v, dict) and is_engine:
            out.extend(f"{prefix}.{k}" for k, x in v.items() if x is not None)
        elif not isinstance(v, dict):
            out.append(prefix)

    walk("", plan.model_dump(exclude_none=True))
    return sorted(out)


def choose_profile(plan: RunPlan, env: PlanEnvironment, out: Refusals) -> DeviceProfile:
    """The device profile the run trains on.

    A stated ``execution.deviceProfile`` wins (an unknown one is refused, naming the
    declared devices). Otherwise the first profile that holds ``execution.gpus`` devices
    on one node and ``execution.hostMemoryGiB``, trying in order: the deployment's
    ``defaultDeviceProfile``, profiles of the preferred kind (CUDA when this machine has
    it, else the CPU), then the rest. When none qualifies, the preferred one (and
    :func:`akka_optimize.plan.rules.check.check_device` refuses, naming the devices).
    """
    dep = env.deployment
    ex = plan.execution
    if ex is not None and ex.deviceProfile is not None:
        prof = dep.profile(ex.deviceProfile)
        if prof is not None:
            return prof
        names = ", ".join(p.name for p in dep.deviceProfiles)
        out.add(
            "execution.deviceProfile",
            f"execution.deviceProfile {ex.deviceProfile!r} is not a device this deployment "
            f"declares; the declared devices are: {names}.",
            ex.deviceProfile,
            [p.name for p in dep.deviceProfiles],
        )
    want = "cuda" if env.cuda_available else "cpu"
    order: list[DeviceProfile] = []
    if dep.defaultDeviceProfile and dep.profile(dep.defaultDeviceProfile):
        order.append(dep.profile(dep.defaultDeviceProfile))  # type: ignore[arg-type]
    order += [p for p in dep.deviceProfiles if p.kind == want and p not in order]
    order += [p for p in dep.deviceProfiles if p not in order]
    gpus = ex.gpus if ex is not None and ex.gpus else 1
    host = ex.hostMemoryGiB if ex is not None else None
    for p in order:
        if p.devicesPerNode >= gpus and (host is None or p.hostMemoryGiB >= host):
            return p
    return order[0]


def fill(defaults: dict[str, Any], stated: BaseModel | None) -> dict[str, Any]:
    """``defaults`` with every non-null field of ``stated`` laid over it, recursively."""
    out: dict[str, Any] = {}
    for k, d in defaults.items():
        v = getattr(stated, k, None) if stated is not None else None
        if isinstance(d, dict):
            out[k] = fill(d, v if isinstance(v, BaseModel) else None)
        else:
            out[k] = d if v is None else v
    return out


def _memory(plan: RunPlan, env: PlanEnvironment, path: str) -> Any:
    node: Any = plan
    for part in path.split("."):
        node = getattr(node, part, None) if node is not None else None
    if node is not None:
        return node
    return env.deployment.memorySettings.defaults.get(path, D.FALLBACK_MEMORY[path])


def build_resolved(plan: RunPlan, env: PlanEnvironment, facts: Facts) -> dict[str, Any]:
    """The resolved descriptor before references are pinned (see :class:`ResolvedPlan`)."""
    cfg = plan.config
    method = cfg.method
    hp_key = D.HYPERPARAMS_KEY[method]
    hp = fill(D.hyperparams(method), getattr(cfg, hp_key))
    if method == "dpo" and hp["lossWeights"] is None:
        hp["lossWeights"] = [1.0] * len(hp["lossTypes"])
    max_ctx = (facts.entry.max_context_tokens if facts.entry else None) or D.MAX_SEQ_LENGTH
    max_seq = cfg.maxSeqLength or min(D.MAX_SEQ_LENGTH, max_ctx)
    data = fill(D.DATA, cfg.data)
    if method == "sft":
        t = hp["training"]
        stated_t = cfg.hyperparams.training if cfg.hyperparams else None
        if not data["use_dynamic_bsz"] and (stated_t is None or stated_t.microBatchPerGpu is None):
            t["microBatchPerGpu"] = 1
        if facts.multi and t["tokensPerGpu"] is None:
            limit = facts.qualified_limit
            t["tokensPerGpu"] = limit if limit else max_seq * t["microBatchPerGpu"]
    weight_precision = _memory(plan, env, "config.model.weightPrecision")
    model = fill(D.model(facts.profile.kind, weight_precision), cfg.model)
    model["weightPrecision"] = weight_precision
    execution = fill(D.EXECUTION, plan.execution)
    execution["deviceProfile"] = facts.profile.name
    execution["memory"] = None
    execution["rollout"] = None
    if not facts.sft_single:
        execution["memory"] = {
            "offload": {
                k: _memory(plan, env, f"execution.memory.offload.{k}")
                for k in ("weights", "optimizer", "activations")
            },
            "sharding": _memory(plan, env, "execution.memory.sharding"),
        }
    if method == "rl":
        execution["rollout"] = {"memoryShare": _memory(plan, env, "execution.rollout.memoryShare")}
    config: dict[str, Any] = {
        "dataset": cfg.dataset,
        "method": method,
        hp_key: hp,
        "maxSeqLength": max_seq,
        "model": model,
        "data": data,
        "loss": fill(D.LOSS, cfg.loss) if method == "sft" else None,
        "engineSettings": resolve_engine_settings(plan, env, facts),
    }
    return {
        "kind": "run",
        "project": plan.project.lower(),
        "baseModel": facts.entry.repository if facts.entry else plan.baseModel,
        "modelName": None,
        "submissionId": plan.submissionId,
        "smoke": bool(plan.smoke),
        "smokeCheck": fill(D.SMOKE_CHECK, plan.smokeCheck) if plan.smoke else None,
        "warmStartModelId": plan.warmStartModelId,
        "branchFrom": plan.branchFrom.model_dump() if plan.branchFrom else None,
        "config": config,
        "execution": execution,
    }


def resolve_engine_settings(plan: RunPlan, env: PlanEnvironment, facts: Facts) -> dict[str, Any]:
    """Every engine setting of the loop that runs: stated, else the deployment's default,
    else the declared one. Empty for a supervised run on one device (none apply)."""
    if facts.sft_single:
        return {}
    loop = "rl" if plan.config.method == "rl" else "sft"
    stated = plan.config.engineSettings or {}
    dep_defaults = env.deployment.engineSettings.defaults
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if loop not in s.loops:
            continue
        if s.key in stated and stated[s.key] is not None and s.key in BY_KEY:
            value = stated[s.key]
            out[s.key] = float(value) if s.type is float and isinstance(value, int) else value
        else:
            out[s.key] = dep_defaults.get(s.key, s.default)
    if loop == "sft" and out.get("dtypes.compute") is None:
        cfg_model = plan.config.model
        stated_precision = cfg_model.precision if cfg_model else None
        out["dtypes.compute"] = stated_precision or (
            "bf16" if facts.profile.kind == "cuda" else "fp32"
        )
    return out


def _pin(
    env: PlanEnvironment, kind: str, path: str, ref: str, project: str, out: Refusals
) -> str | None:
    try:
        if kind == "dataset":
            return env.resolve_dataset(ref, project)
        return env.resolve_artifact(kind, ref, project)
    except AkkaError as exc:
        out.add(path, f"{path}: {exc.message}", ref)
        return None


def pin_references(resolved: dict[str, Any], env: PlanEnvironment, out: Refusals) -> dict[str, str]:
    """Pin every registry reference of ``resolved`` in place; refusals name the field."""
    project = resolved["project"]
    cfg = resolved["config"]
    pinned: dict[str, str] = {}
    todo: list[tuple[str, str, str]] = [("dataset", "config.dataset", cfg["dataset"])]
    if cfg["data"]["validationDataset"]:
        todo.append(("dataset", "config.data.validationDataset", cfg["data"]["validationDataset"]))
    if resolved["warmStartModelId"]:
        todo.append(("model", "warmStartModelId", resolved["warmStartModelId"]))
    reward = (cfg.get("rlHyperparams") or {}).get("reward") or ""
    if reward.startswith("bundle:"):
        ref = reward[len("bundle:") :].split("#", 1)[0]
        todo.append(("bundle", "config.rlHyperparams.reward", ref))
    elif reward.startswith("model:"):
        todo.append(("model", "config.rlHyperparams.reward", reward[len("model:") :]))
    for kind, path, ref in todo:
        value = _pin(env, kind, path, ref, project, out)
        if value is None:
            continue
        pinned[path] = value
        if path == "config.dataset":
            cfg["dataset"] = value
        elif path == "config.data.validationDataset":
            cfg["data"]["validationDataset"] = value
        elif path == "warmStartModelId":
            resolved["warmStartModelId"] = value
        elif kind == "bundle":
            cfg["rlHyperparams"]["reward"] = "bundle:" + value + "#" + reward.split("#", 1)[1]
        else:
            cfg["rlHyperparams"]["reward"] = "model:" + value
    return pinned


def resolve_plan(
    raw: Any, env: PlanEnvironment, frozen: dict[str, Any] | None = None
) -> ResolvedPlan:
    """Resolve a submitted plan against ``env``.

    Args:
        raw: the decoded JSON body (any JSON value; only an object can be accepted).
        env: the deployment, projects, registry and catalog to resolve against.
        frozen: for a branch, its source run's resolved plan: the settings the branch does
            not state keep their values there (:func:`akka_optimize.plan.frozen.
            keep_frozen`); ``stated`` stays the branch's own.

    Returns:
        The :class:`ResolvedPlan`.

    Raises:
        PlanRefused: (400) with every refusal: schema errors first (unknown fields, types,
            bounds); otherwise every rule of :mod:`akka_optimize.plan.rules.check` and every
            reference that does not resolve.
    """
    out = Refusals()
    plan = parse_plan(raw, out)
    if plan is None:
        raise PlanRefused(out.items)
    stated = stated_paths(plan)
    if frozen and isinstance(raw, dict):
        # the branch's plan on today's defaults (the pass below reports its refusals)
        profile = choose_profile(plan, env, Refusals())
        facts = Facts.build(plan, env, profile, env.catalog_entry(plan.baseModel))
        today = build_resolved(plan, env, facts)
        plan = parse_plan(keep_frozen(raw, frozen, today, stated), out)
        if plan is None:
            raise PlanRefused(out.items)
    profile = choose_profile(plan, env, out)
    entry = env.catalog_entry(plan.baseModel)
    facts = Facts.build(plan, env, profile, entry)
    resolved = build_resolved(plan, env, facts)
    check_all(plan, resolved, env, facts, out)
    pinned: dict[str, str] = {}
    if not out.has("project"):
        pinned = pin_references(resolved, env, out)
    if out:
        raise PlanRefused(out.items)
    resolved["modelName"] = f"{resolved['project']}/{facts.model_name}"
    return ResolvedPlan(
        plan=resolved,
        raw=raw,
        stated=stated,
        pinned=pinned,
        config_hash=config_hash(resolved),
        device_profile=profile,
        catalog_entry=entry,
    )
