"""``tinker://`` paths of saved training states, and what a client created from one needs.

``save_state(name)`` answers ``tinker://MODEL_ID/weights/NAME``; the run of that client
records the state's blob key under ``results.tinkerSaves["weights/NAME"]`` and its model id
under ``results.tinkerModelId``, so a path resolves from the database even after the client
(and the service process that knew it) is gone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import InvalidRequest, NotFound
from .kind import ATTN, METHOD, MLP, UNEMBED, saved_key


def find_state(s: Session, project: str | None, path: str) -> tuple[Run, str]:
    """The run and blob key of the training state at ``path``.

    Args:
        project: the caller's project (None: any, for an admin key).

    Raises:
        InvalidRequest: ``path`` is not ``tinker://MODEL_ID/weights/NAME``.
        NotFound: no client of the caller's projects saved a state of that name.
    """
    parts = path.removeprefix("tinker://").split("/")
    if not path.startswith("tinker://") or len(parts) != 3 or parts[1] != "weights":
        raise InvalidRequest(
            f"path {path!r} is not a saved training state (tinker://MODEL_ID/weights/NAME, "
            "as save_state answers).",
            field="path",
        )
    model_id, _, name = parts
    q = select(Run).where(Run.method == METHOD)
    if project:
        q = q.where(Run.project == project)
    for run in s.scalars(q):
        key = saved_key(run, f"weights/{name}")
        if (run.results or {}).get("tinkerModelId") == model_id and key:
            return run, key
    raise NotFound(
        f"path {path!r}: no training state of that name was saved (or it was deleted or expired).",
        field="path",
    )


def lora_request(run: Run) -> dict[str, Any]:
    """A ``create_model`` request that rebuilds ``run``'s adapter (same base model, rank,
    seed and targets), for a client created from one of its states."""
    lora = run.resolved["lora"]
    targets = set(lora["targets"])
    return {
        "base_model": run.base_model,
        "lora_config": {
            "rank": lora["rank"],
            "seed": lora["seed"],
            "train_attn": bool(targets & set(ATTN)),
            "train_mlp": bool(targets & set(MLP)),
            "train_unembed": UNEMBED in targets,
        },
        "user_metadata": run.resolved.get("userMetadata") or {},
    }
