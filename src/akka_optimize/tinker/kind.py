"""Tinker training clients as jobs: the ``tinker`` kind, how one is created, and how its
sampler weights become model versions.

``create_lora_training_client`` records a run (method ``tinker``) in the caller's project:
the same scheduler, capacity claim, executor, states and ``training runs list/get/metrics``
as a plan-driven run (DESIGN.md "Where a run executes"). Its worker
(:func:`akka_optimize.tinker.worker.serve`) holds the engine session. Tinker's
``LoraConfig`` maps onto the catalog entry's LoRA targets: ``train_attn`` the attention
projections, ``train_mlp`` the MLP projections, ``train_unembed`` the output head
(``lm_head``); an option the entry cannot honour is refused, naming it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from typing import Any

from sqlalchemy.orm import Session

from ..catalog import load_catalog
from ..catalog.cache import ready_model_dir
from ..db.models.jobs import Run, RunAttempt
from ..deployment import cuda_available
from ..errors import AkkaError, InvalidRequest
from ..jobs import states as S
from ..jobs.capacity import usage as capacity
from ..jobs.context import JobContext
from ..jobs.kinds import JobKind, Launch, model_registered
from ..jobs.records import end_attempt
from ..jobs.scheduler import wake
from ..jobs.spec import JobSpec
from .registering import register_blob

METHOD = "tinker"
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
UNEMBED = "lm_head"
IDLE_SECONDS = 1800
"""The deployment's default ``service.tinkerIdleSeconds``."""
HEARTBEAT_SECONDS = 45
"""The deployment's default ``service.tinkerHeartbeatSeconds``."""


LORA_SWITCHES = ("train_attn", "train_mlp", "train_unembed")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def lora_config(given: Any) -> dict[str, Any]:
    """Tinker's ``lora_config`` checked: ``rank`` a whole number from 1 to 512, ``seed`` a
    whole number (0 when absent or null), the switches :data:`LORA_SWITCHES` true or false
    (true when absent); other keys are kept for :func:`lora_targets`.

    Raises:
        InvalidRequest: naming ``lora_config`` (not an object) or ``lora_config.KEY``.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise InvalidRequest(
            f"lora_config is {given!r:.60}; give an object with rank (1 to 512).",
            field="lora_config",
        )
    rank = given.get("rank")
    if not _whole(rank) or not 1 <= rank <= 512:
        raise InvalidRequest(
            f"lora_config.rank is {rank!r:.40}; give a rank from 1 to 512.",
            field="lora_config.rank",
        )
    seed = given.get("seed")
    if seed is not None and not _whole(seed):
        raise InvalidRequest(
            f"lora_config.seed is {seed!r:.40}; give a whole number.", field="lora_config.seed"
        )
    for key in LORA_SWITCHES:
        if not isinstance(given.get(key, True), bool):
            raise InvalidRequest(
                f"lora_config.{key} is {given[key]!r:.40}; give true or false.",
                field=f"lora_config.{key}",
            )
    return {**given, "rank": rank, "seed": seed or 0}


def lora_targets(entry: Any, lora: dict[str, Any]) -> tuple[str, ...]:
    """The LoRA target suffixes for Tinker's ``lora_config`` on catalog entry ``entry``.

    Raises:
        InvalidRequest: (field ``lora_config.OPTION``) the entry's targets are a regular
            expression (only all-default options can be honoured), or leave nothing to train.
    """
    targets = entry.lora_target_modules
    want = {k: bool(lora.get(k, True)) for k in LORA_SWITCHES}
    if isinstance(targets, str):
        off = [k for k in ("train_attn", "train_mlp") if not want[k]]
        if off or want["train_unembed"]:
            opt = off[0] if off else "train_unembed"
            raise InvalidRequest(
                f"lora_config.{opt}: base model {entry.repository} (family {entry.family}) "
                "names its LoRA targets by a regular expression, so this option cannot be "
                f"honoured; leave train_attn and train_mlp true and set train_unembed=False.",
                field=f"lora_config.{opt}",
            )
        return (targets,)  # type: ignore[return-value]
    chosen = [
        t
        for t in targets
        if (t in ATTN and want["train_attn"])
        or (t in MLP and want["train_mlp"])
        or (t not in ATTN and t not in MLP)
    ]
    if want["train_unembed"]:
        chosen.append(UNEMBED)
    for opt, names in (("train_attn", ATTN), ("train_mlp", MLP)):
        if want[opt] and not set(names) & set(targets):
            raise InvalidRequest(
                f"lora_config.{opt}: base model {entry.repository} (family {entry.family}) "
                f"has no {opt.removeprefix('train_')} LoRA targets among {list(targets)}.",
                field=f"lora_config.{opt}",
            )
    if not chosen:
        raise InvalidRequest(
            "lora_config: train_attn, train_mlp and train_unembed are all false; nothing "
            "would train.",
            field="lora_config",
        )
    return tuple(chosen)


def create_training_run(
    ctx: JobContext,
    s: Session,
    project: str,
    request: dict[str, Any],
    model_name: str,
    load: dict[str, Any] | None = None,
    sampler: dict[str, Any] | None = None,
) -> Run:
    """Record the run of a new training client; it waits ``QUEUED`` for the scheduler.
    With ``load`` (``{"key", "optimizer", "path"}``) its worker starts from that saved
    training state. With ``sampler`` (``{"key": blob key of a saved adapter or None,
    "modelPath" or "baseModel"}``) the run is a sampling client
    (:mod:`akka_optimize.tinker.samplers`): its worker loads that adapter (none: the base
    model's own outputs) and serves only ``asample``.

    Raises:
        NotFound / Conflict: ``base_model`` is not in the catalog or not selected and
            ``READY`` (the catalog's sentence, field ``base_model``).
        InvalidRequest: a ``lora_config`` the model cannot honour (the option named).
    """

    base = str(request.get("base_model") or "")
    try:
        _path, entry = ready_model_dir(s, ctx.settings, base)
    except AkkaError as exc:
        exc.field = "base_model"
        exc.message = f"base_model {base!r}: {exc.message}"
        raise
    lora = lora_config(request.get("lora_config"))
    rank = lora["rank"]
    targets = lora_targets(entry, lora)
    dep = ctx.deployment()
    device = _device_kind(dep)
    resolved = {
        "kind": "tinker",
        "project": project,
        "baseModel": entry.repository,
        "lora": {"rank": rank, "seed": lora["seed"], "targets": list(targets)},
        "userMetadata": request.get("user_metadata") or {},
        "idleSeconds": dep.service.tinkerIdleSeconds,
        "heartbeatSeconds": dep.service.tinkerHeartbeatSeconds,
        **({"loadFrom": load} if load else {}),
        **({"sampler": sampler} if sampler else {}),
    }
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    resolved["claims"] = capacity.claim_list(dep, None, device, 0, False)
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=project,
        method=METHOD,
        state=S.QUEUED,
        plan=request,
        resolved=resolved,
        config_hash=digest,
        base_model=entry.repository,
        dataset="",
        validation_dataset=None,
        model_name=model_name,
        device_kind=device,
        gpus=0,
        results={},
        queue_reason="waiting for the scheduler",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return run


def _device_kind(dep: Any) -> str:
    """The deployment's default device profile's kind, else ``cuda`` when this machine has
    a CUDA device, else ``cpu``."""

    prof = dep.profile(dep.defaultDeviceProfile) if dep.defaultDeviceProfile else None
    return prof.kind if prof is not None else ("cuda" if cuda_available() else "cpu")


def build_spec(launch: Launch) -> JobSpec:
    """The attempt's spec: engine settings from the run's LoRA choices (fp32 on a CPU)."""

    run = launch.run
    r = run.resolved
    dep = launch.ctx.deployment()
    entry = load_catalog(dep).get(run.base_model)
    device = "cuda" if run.device_kind == "cuda" else "cpu"
    engine = {
        "lora_rank": r["lora"]["rank"],
        "lora_alpha": 32.0,
        "target_modules": r["lora"]["targets"],
        "seed": r["lora"]["seed"],
        "device": device,
        "auto_class": getattr(entry, "auto_class", "AutoModelForCausalLM"),
    }
    return launch.spec(
        dataset={},
        engine=engine,
        device=device,
        extra={
            "idle_seconds": r.get("idleSeconds", IDLE_SECONDS),
            "load": r.get("loadFrom"),
            "sampler": r.get("sampler"),
        },
    )


def register_sampler_weights(
    ctx: JobContext, s: Session, run: Run, name: str, key: str, step: int
) -> str:
    """Register the adapter a worker saved under ``key`` as the next version of the run's
    model (base model and run recorded); returns the pinned reference. The run's
    ``results.tinkerSaves["sampler_weights/NAME"]`` records the version and
    ``results.tinkerSamplerKeys[NAME]`` the blob key (what a sampling client loads)."""

    metadata = {
        "run": run.id,
        "method": METHOD,
        "step": step,
        "tinkerName": name,
        "rank": run.resolved["lora"]["rank"],
    }
    provenance = {"run": run.id, "baseModel": run.base_model, "step": step, "name": name}
    rv = register_blob(s, ctx.store, run, key, run.project, run.model_name, metadata, provenance)
    model_registered(ctx, s, run.project, rv)
    saved = dict((run.results or {}).get("tinkerSaves") or {})
    saved[f"sampler_weights/{name}"] = rv.pinned
    keys = {**((run.results or {}).get("tinkerSamplerKeys") or {}), name: key}
    run.results = {**(run.results or {}), "tinkerSaves": saved, "tinkerSamplerKeys": keys}
    run.registered_model = rv.pinned
    return rv.pinned


TTL_RANGE = (3600, 315_576_000)
"""The checkpoint TTLs the SDK documents: 1 hour to 10 years, in seconds."""


def ttl_refusal(ttl: Any) -> str | None:
    """The sentence refusing ``ttl_seconds`` (None: it is absent or in range)."""
    low, high = TTL_RANGE
    if ttl is None or (isinstance(ttl, int) and not isinstance(ttl, bool) and low <= ttl <= high):
        return None
    return f"ttl_seconds is {ttl!r}; give {low} (1 hour) to {high} (10 years), or none."


def expires_at(ttl: int | None, now: dt.datetime | None = None) -> str | None:
    """The UTC ISO time ``ttl`` seconds after ``now`` (None: no expiry)."""
    if ttl is None:
        return None
    return ((now or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=ttl)).isoformat()


def record_checkpoint(
    run: Run, checkpoint_id: str, key: str, size: int | None, ttl: int | None = None
) -> None:
    """Note checkpoint ``checkpoint_id`` (``weights/NAME`` or ``sampler_weights/NAME``) of
    ``run`` in ``results.tinkerCheckpoints``: its blob ``key``, ``bytes``, UTC ``time``
    and, with ``ttl`` (seconds), ``expiresAt`` (what the RestClient's listings show)."""
    now = dt.datetime.now(dt.UTC)
    marks = dict((run.results or {}).get("tinkerCheckpoints") or {})
    marks[checkpoint_id] = {
        "key": key,
        "bytes": size,
        "time": now.isoformat(),
        "expiresAt": expires_at(ttl, now),
    }
    run.results = {**(run.results or {}), "tinkerCheckpoints": marks}


def expired(run: Run, checkpoint_id: str, now: dt.datetime | None = None) -> bool:
    """Whether checkpoint ``checkpoint_id`` of ``run`` has a TTL that ran out by ``now``."""
    mark = ((run.results or {}).get("tinkerCheckpoints") or {}).get(checkpoint_id) or {}
    at = mark.get("expiresAt")
    return bool(at) and dt.datetime.fromisoformat(at) <= (now or dt.datetime.now(dt.UTC))


def saved_key(run: Run, checkpoint_id: str, now: dt.datetime | None = None) -> str | None:
    """The blob key of checkpoint ``checkpoint_id`` of ``run``; None when it was never
    saved, was deleted, or expired by ``now``."""
    res = run.results or {}
    saves = res.get("tinkerSaves") or {}
    if checkpoint_id not in saves or expired(run, checkpoint_id, now):
        return None
    kind, name = checkpoint_id.split("/", 1)
    if kind == "sampler_weights":
        return (res.get("tinkerSamplerKeys") or {}).get(name)
    return saves[checkpoint_id]


def _completed(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> None:
    res = event.get("result") or {}
    ended = str(res.get("ended") or "the client finished")
    results = dict(run.results or {})
    checkpoint = f"weights/{res.get('stateName') or 'idle'}"  # idle, or heartbeat
    if res.get("stateKey"):  # an idle or silent client saved its state before it ended
        saves = {**(results.get("tinkerSaves") or {}), checkpoint: res["stateKey"]}
        path = f"tinker://{results.get('tinkerModelId')}/{checkpoint}"
        results["tinkerSaves"] = saves
        ended += f"; its state was saved as {path}"
    run.results = {**results, "ended": ended}
    if res.get("stateKey"):
        record_checkpoint(run, checkpoint, res["stateKey"], res.get("bytes"))
    end_attempt(run, att, S.SUCCEEDED)


TINKER = JobKind(
    name=METHOD,
    worker="akka_optimize.tinker.worker:serve",
    build_spec=build_spec,
    events={"completed": _completed},
)
"""The Tinker training-client kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""
