"""The RestClient's training runs and checkpoints, mapped onto the platform's runs.

A Tinker *training run* is a training client's run (method ``tinker``; a sampling
client's run is not one): its ``training_run_id`` is the client's model id
(``results.tinkerModelId``), its owner the project. Its *checkpoints* are what the client
saved: ``weights/NAME`` (``save_state``, a training state) and ``sampler_weights/NAME``
(``save_weights_for_sampler``, registered as a model version), each with its
``tinker://`` path, time, size and expiry (``results.tinkerCheckpoints``). A checkpoint
whose TTL ran out stops resolving at once, and the next listing deletes it. Deleting one
removes its ``tinker://`` path and its blobs; a sampler checkpoint's registered model
version stays in the registry, which has its own lifecycle. Every answer is the JSON of the
SDK's types (``TrainingRun``, ``TrainingRunsResponse``, ``CheckpointsListResponse``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import InvalidRequest, NotFound
from .kind import METHOD, expired, expires_at, ttl_refusal

KINDS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
"""A checkpoint id's first part → the SDK's ``checkpoint_type``."""
MAX_LIMIT = 1000


def _iso(value: dt.datetime | str | None) -> str | None:
    """An ISO 8601 time in UTC (the database may hand back a naive UTC datetime)."""
    if value is None or isinstance(value, str):
        return value
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()


def training_runs(s: Session, project: str | None) -> list[Run]:
    """The training clients' runs of ``project`` (None: every project), newest first."""
    q = select(Run).where(Run.method == METHOD).order_by(Run.created_at.desc(), Run.id)
    if project:
        q = q.where(Run.project == project)
    return [
        r
        for r in s.scalars(q)
        if (r.results or {}).get("tinkerModelId") and not (r.resolved or {}).get("sampler")
    ]


def find_run(s: Session, project: str | None, training_run_id: str) -> Run:
    """The run of training client ``training_run_id`` in ``project`` (None: any project).

    Raises:
        NotFound: no training run of that id in the project (field ``training_run_id``).
    """
    for run in training_runs(s, project):
        if run.results["tinkerModelId"] == training_run_id:
            return run
    raise NotFound(
        f"training_run_id {training_run_id!r}: no such training run in this project.",
        field="training_run_id",
    )


def checkpoints(run: Run, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The run's checkpoints as the SDK's ``Checkpoint`` JSON, oldest first (none that
    expired by ``now``)."""
    res = run.results or {}
    marks = res.get("tinkerCheckpoints") or {}
    out = []
    for cid in res.get("tinkerSaves") or {}:
        if expired(run, cid, now):
            continue
        kind = cid.split("/", 1)[0]
        mark = marks.get(cid) or {}
        out.append(
            {
                "checkpoint_id": cid,
                "checkpoint_type": KINDS[kind],
                "time": mark.get("time") or _iso(run.created_at),
                "tinker_path": f"tinker://{res['tinkerModelId']}/{cid}",
                "size_bytes": mark.get("bytes"),
                "public": False,
                "expires_at": mark.get("expiresAt"),
            }
        )
    return sorted(out, key=lambda c: c["time"])


def training_run(run: Run) -> dict[str, Any]:
    """``run`` as the SDK's ``TrainingRun`` JSON (``last_request_time``: when it ended,
    else now for a live client)."""
    saved = checkpoints(run)
    last = {t: [c for c in saved if c["checkpoint_type"] == t] for t in KINDS.values()}
    meta = (run.resolved or {}).get("userMetadata") or {}
    return {
        "training_run_id": run.results["tinkerModelId"],
        "base_model": run.base_model,
        "model_owner": run.project,
        "is_lora": True,
        "lora_rank": run.resolved["lora"]["rank"],
        "last_request_time": _iso(run.finished_at or dt.datetime.now(dt.UTC)),
        "corrupted": False,
        "last_checkpoint": last["training"][-1] if last["training"] else None,
        "last_sampler_checkpoint": last["sampler"][-1] if last["sampler"] else None,
        "user_metadata": {str(k): str(v) for k, v in meta.items()},
    }


def page(limit: Any, offset: Any) -> tuple[int, int]:
    """``limit`` (1 to 1000) and ``offset`` (≥ 0) of a listing.

    Raises:
        InvalidRequest: either is out of range or not a whole number (the field named).
    """
    for name, value, low in (("limit", limit, 1), ("offset", offset, 0)):
        if not isinstance(value, int) or not low <= value <= (MAX_LIMIT if low else 2**31):
            top = MAX_LIMIT if low else 2**31
            raise InvalidRequest(f"{name} is {value!r}; give {low} to {top}.", field=name)
    return limit, offset


def list_training_runs(s: Session, project: str | None, limit: int, offset: int) -> dict:
    """One page of training runs as the SDK's ``TrainingRunsResponse`` JSON."""
    runs = training_runs(s, project)
    return {
        "training_runs": [training_run(r) for r in runs[offset : offset + limit]],
        "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)},
    }


def list_user_checkpoints(s: Session, project: str | None, limit: int, offset: int) -> dict:
    """One page of every checkpoint of the project's training runs, newest first, as the
    SDK's ``CheckpointsListResponse`` JSON."""
    every = [c for r in training_runs(s, project) for c in checkpoints(r)]
    every.sort(key=lambda c: c["time"], reverse=True)
    return {
        "checkpoints": every[offset : offset + limit],
        "cursor": {"offset": offset, "limit": limit, "total_count": len(every)},
    }


def checkpoint_id(kind: str, name: str) -> str:
    """``KIND/NAME`` of a checkpoint route.

    Raises:
        InvalidRequest: ``kind`` is not one of :data:`KINDS` (field
            ``checkpoint_id``).
    """
    if kind not in KINDS:
        raise InvalidRequest(
            f"checkpoint_id {kind + '/' + name!r}: give weights/NAME, sampler_weights/NAME "
            "or external_weights/NAME.",
            field="checkpoint_id",
        )
    return f"{kind}/{name}"


def live_checkpoint(s: Session, project: str | None, run_id: str, cid: str) -> Run:
    """The run of ``run_id`` holding unexpired checkpoint ``cid``.

    Raises:
        NotFound: no such run (field ``training_run_id``) or checkpoint (``checkpoint_id``).
    """
    run = find_run(s, project, run_id)
    if cid not in ((run.results or {}).get("tinkerSaves") or {}) or expired(run, cid):
        raise NotFound(
            f"checkpoint_id {cid!r}: training run {run_id} has no such checkpoint (or it "
            "was deleted or expired).",
            field="checkpoint_id",
        )
    return run


def set_ttl(s: Session, project: str | None, run_id: str, cid: str, ttl: Any) -> str | None:
    """Make checkpoint ``cid`` of ``run_id`` expire ``ttl`` seconds from now (None: never);
    returns the new ``expires_at``.

    Raises:
        InvalidRequest: ``ttl`` is not 3600 to 315576000 or null (field ``ttl_seconds``).
        NotFound: no such run or live checkpoint (the field named).
    """
    refusal = ttl_refusal(ttl)
    if refusal:
        raise InvalidRequest(refusal, field="ttl_seconds")
    run = live_checkpoint(s, project, run_id, cid)
    marks = dict((run.results or {}).get("tinkerCheckpoints") or {})
    marks[cid] = {**(marks.get(cid) or {}), "expiresAt": expires_at(ttl)}
    run.results = {**(run.results or {}), "tinkerCheckpoints": marks}
    return marks[cid]["expiresAt"]


def sweep_expired(s: Session, store: Any, project: str | None) -> int:
    """Delete every expired checkpoint of the project's training runs (their paths stopped
    resolving when they expired; this removes the records and blobs); returns how many."""
    gone = 0
    for run in training_runs(s, project):
        for cid in list((run.results or {}).get("tinkerSaves") or {}):
            if expired(run, cid):
                _remove(run, cid, store)
                gone += 1
    return gone


def delete_checkpoint(s: Session, store: Any, project: str | None, run_id: str, cid: str) -> str:
    """Remove checkpoint ``cid`` of training run ``run_id``: its ``tinker://`` path stops
    resolving and its blobs are deleted; returns the registered model version a sampler
    checkpoint had (it stays), else "".

    Raises:
        NotFound: no such run (field ``training_run_id``) or checkpoint (``checkpoint_id``).
    """
    return _remove(live_checkpoint(s, project, run_id, cid), cid, store)


def _remove(run: Run, cid: str, store: Any) -> str:
    res = dict(run.results or {})
    saves = dict(res.get("tinkerSaves") or {})
    value = saves.pop(cid)
    marks = dict(res.get("tinkerCheckpoints") or {})
    mark = marks.pop(cid, None) or {}
    keys = dict(res.get("tinkerSamplerKeys") or {})
    key = keys.pop(cid.split("/", 1)[1], None) if cid.startswith("sampler_") else value
    key = mark.get("key") or key
    run.results = {
        **res,
        "tinkerSaves": saves,
        "tinkerCheckpoints": marks,
        "tinkerSamplerKeys": keys,
    }
    if key:
        store.delete(key)
    return value if cid.startswith("sampler_") else ""
