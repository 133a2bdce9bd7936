"""Warm starts: a run whose adapter starts from a registered model version
(``warmStartModelId``, seeds/000 "Run descriptor"; FEATURES F036, F046).

The plan names a trained model (``triage/qwen3-0.6b:v2``, resolved in the plan's
project and pinned when accepted). The run trains a new adapter initialised with that
version's weights, with a fresh optimizer and its own schedule, data and length; the
model it registers records the version it started from as its parent. The version must
be an adapter of the run's base model with the run's LoRA rank and alpha; anything else
is refused at start, naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from ..errors import InvalidRequest
from ..refs import parse_ref
from ..registry import resolve
from ..store import content_key
from .fields import setting as _get


def warm_start_source(session: Session, store: Any, plan: dict[str, Any]) -> Any | None:
    """The registry version a plan's ``warmStartModelId`` names (None without one).

    Returns:
        :class:`akka_optimize.registry.ResolvedVersion` of the adapter.

    Raises:
        InvalidRequest: not an adapter, an adapter of another base model, or of another
            rank or alpha than the plan's (naming ``config.hyperparams.lora.*``).
    """
    ref = plan.get("warmStartModelId")
    if not ref:
        return None

    rv = resolve(session, "model", ref)
    if rv.source != "adapter" or "adapter_config.json" not in rv.files:
        raise InvalidRequest(
            f"warmStartModelId {rv.pinned} is a base model, not a trained adapter; name a "
            "model version a run registered (registry models versions NAME lists them).",
            field="warmStartModelId",
        )
    mine = parse_ref(plan["baseModel"])
    theirs = parse_ref(rv.base_model) if rv.base_model else mine
    if (mine.namespace, mine.name) != (theirs.namespace, theirs.name):
        raise InvalidRequest(
            f"warmStartModelId {rv.pinned} was trained on {rv.base_model}, not on this "
            f"plan's baseModel {plan['baseModel']}.",
            field="warmStartModelId",
        )
    digest = rv.files["adapter_config.json"]["digest"].removeprefix("sha256:")
    conf = json.loads(store.get_bytes(content_key(digest)))
    for key, name in (("r", "rank"), ("lora_alpha", "alpha")):
        want = _get(plan, f"config.hyperparams.lora.{name}")
        if want is not None and float(conf.get(key, want)) != float(want):
            raise InvalidRequest(
                f"config.hyperparams.lora.{name} {want} differs from warmStartModelId "
                f"{rv.pinned}'s {conf.get(key)}; a warm start keeps the adapter's shape, so "
                f"set {name} to {conf.get(key)}.",
                field=f"config.hyperparams.lora.{name}",
            )
    return rv
