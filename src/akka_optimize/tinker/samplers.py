"""Sampling clients of ``ServiceClient.create_sampling_client(model_path=… | base_model=…)``.

Such a client samples weights no live training client holds: the adapter of a saved
``tinker://MODEL_ID/sampler_weights/NAME`` checkpoint, or a selected ``READY`` base model
on its own. It is a run of the ``tinker`` kind like a training client (same scheduler,
device claim, queue and idle end, :mod:`akka_optimize.tinker.kind`) whose worker loads
the base model and that adapter, and answers ``asample`` only. A base-model client's
worker builds a LoRA adapter it never trains: PEFT starts ``B`` at zero, so its outputs
are the base model's own. The run records ``resolved.sampler`` (``modelPath`` or
``baseModel``, and the adapter's blob ``key``), which is how the RestClient's listings
tell a sampling client from a training run.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import InvalidRequest, NotFound
from ..jobs.context import JobContext
from .kind import METHOD, create_training_run, saved_key
from .states import lora_request


def parse_path(
    path: str, field: str, kinds: tuple[str, ...] = ("weights", "sampler_weights")
) -> tuple[str, str, str]:
    """``(model_id, kind, name)`` of ``tinker://MODEL_ID/KIND/NAME``.

    Raises:
        InvalidRequest: (naming ``field``) the path has another shape or ``KIND`` is not
            one of ``kinds``.
    """
    parts = path.removeprefix("tinker://").split("/")
    if (
        not path.startswith("tinker://")
        or len(parts) != 3
        or not all(parts)
        or parts[1] not in kinds
    ):
        shapes = " or ".join(f"tinker://MODEL_ID/{k}/NAME" for k in kinds)
        raise InvalidRequest(
            f"{field} {path[:200]!r} is not a checkpoint path ({shapes}, as the client's "
            "save calls answer).",
            field=field,
        )
    return parts[0], parts[1], parts[2]


def training_run(s: Session, project: str | None, model_id: str) -> Run | None:
    """The training client's run whose model id is ``model_id`` (in ``project``; None: any
    project, for an admin key), or None. Sampling clients' runs are not training runs."""
    q = select(Run).where(Run.method == METHOD)
    if project:
        q = q.where(Run.project == project)
    for run in s.scalars(q):
        if (run.results or {}).get("tinkerModelId") == model_id and not (run.resolved or {}).get(
            "sampler"
        ):
            return run
    return None


def find_saved(
    s: Session,
    project: str | None,
    path: str,
    field: str,
    kinds: tuple[str, ...],
    refused: dict[str, str],
    missing: str,
) -> tuple[Run, str]:
    """The training run (of ``project``; None: any) that saved checkpoint ``path`` and the
    checkpoint's blob key.

    Raises:
        InvalidRequest: (naming ``field``) not ``tinker://MODEL_ID/KIND/NAME`` with a
            ``KIND`` of ``kinds``, or a ``KIND`` in ``refused`` (its sentence).
        NotFound: (naming ``field``) no such checkpoint, or it was deleted or expired
            (``missing`` says what to do).
    """
    model_id, kind, name = parse_path(path, field, kinds)
    if kind in refused:
        raise InvalidRequest(f"{field} {path!r} {refused[kind]}", field=field)
    run = training_run(s, project, model_id)
    key = saved_key(run, f"{kind}/{name}") if run is not None else None
    if run is None or not key:
        raise NotFound(f"{field} {path!r}: {missing}", field=field)
    return run, key


def find_sampler_weights(s: Session, project: str | None, path: str) -> tuple[Run, str]:
    """The training run that saved sampler checkpoint ``path`` and the adapter's blob key.

    Raises:
        InvalidRequest: ``path`` is not ``tinker://MODEL_ID/sampler_weights/NAME`` (field
            ``model_path``).
        NotFound: no training client of the caller's project saved sampler weights of that
            name (field ``model_path``).
    """
    state = (
        "is a training state; sample from a sampler checkpoint "
        "(tinker://MODEL_ID/sampler_weights/NAME, from save_weights_for_sampler)."
    )
    missing = (
        "no sampler weights of that name were saved in this project, or they were deleted "
        "or expired (save_weights_for_sampler(name) saves them)."
    )
    kinds = ("weights", "sampler_weights")
    return find_saved(s, project, path, "model_path", kinds, {"weights": state}, missing)


def create_sampling_run(
    ctx: JobContext, s: Session, project: str, model_path: str | None, base_model: str | None
) -> Run:
    """Record the run of a sampling client of ``model_path`` (a saved sampler checkpoint)
    or, without one, of ``base_model`` alone; it waits ``QUEUED`` for the scheduler.

    Raises:
        InvalidRequest: neither is given (field ``model_path``); ``model_path`` is no sampler
            checkpoint path; ``base_model`` is given too and is not the checkpoint's base
            model (field ``base_model``).
        NotFound: no such checkpoint (field ``model_path``).
        NotFound / Conflict: the base model is not in the catalog or not selected and
            ``READY`` (field ``base_model``).
    """
    if model_path:
        source, key = find_sampler_weights(s, project, model_path)
        if base_model and base_model != source.base_model:
            raise InvalidRequest(
                f"base_model {base_model!r}: {model_path} was trained on "
                f"{source.base_model}; leave base_model out or give that one.",
                field="base_model",
            )
        sampler = {"modelPath": model_path, "key": key}
        return create_training_run(
            ctx, s, project, lora_request(source), source.model_name, sampler=sampler
        )
    if not base_model:
        raise InvalidRequest(
            "model_path and base_model are both empty; give a saved sampler checkpoint "
            "(tinker://…/sampler_weights/NAME) or a base model.",
            field="model_path",
        )
    request = {"base_model": base_model, "lora_config": {"rank": 1, "train_unembed": False}}
    sampler = {"baseModel": base_model, "key": None}
    return create_training_run(ctx, s, project, request, "tinker-sampler", sampler=sampler)
