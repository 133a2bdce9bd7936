"""A Tinker checkpoint registered as a model version on request (issue 53 "Checkpoints
out and in"): ``registry models register NS/NAME --from tinker://…``.

A sampler checkpoint (``save_weights_for_sampler``) registers itself as the next version
of its run's model when it is saved; an external one (``save_weights_external``) is a PEFT
folder too. :func:`register_checkpoint` registers either under any name of the run's
project, so it is served like any adapter (``training endpoints create --model
NS/NAME:vN``). A training state (``tinker://…/weights/NAME``: adapter tensors with AdamW
moments, no PEFT config) is refused with how to turn it into one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .registering import register_blob
from .samplers import find_saved


def register_checkpoint(
    s: Session, store: Any, namespace: str, name: str, path: str, alias: str | None = None
) -> Any:
    """Register checkpoint ``path`` of a training client of project ``namespace`` as the
    next version of ``namespace/name``.

    Raises:
        InvalidRequest: (field ``path``) not ``tinker://MODEL_ID/KIND/NAME``, or a training
            state (``weights``), which is no adapter folder.
        NotFound: (field ``path``) no training client of ``namespace`` saved it, or it was
            deleted or expired.
    """
    state = (
        "is a training state (adapter tensors and AdamW moments), not an adapter folder; "
        "make one with save_weights_for_sampler(NAME) or save_weights_external(NAME) "
        "(create_training_client_from_state reopens it)."
    )
    missing = (
        f"no training client of project {namespace!r} saved it (or it was deleted or expired)."
    )
    kinds = ("sampler_weights", "external_weights", "weights")
    run, key = find_saved(s, namespace, path, "path", kinds, {"weights": state}, missing)
    metadata = {
        "run": run.id,
        "method": "tinker",
        "tinkerPath": path,
        "rank": (run.resolved or {}).get("lora", {}).get("rank"),
        "registeredBy": "tinker checkpoint",
    }
    provenance = {"run": run.id, "baseModel": run.base_model, "path": path}
    return register_blob(s, store, run, key, namespace, name, metadata, provenance, alias)
