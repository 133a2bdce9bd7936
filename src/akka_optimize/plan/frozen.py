"""A branch's settings: what it leaves out keeps its source's resolved value (F021).

FEATURES F021: "A later change to the deployment does not change a run, its branches or
its retries". A branch (``branchFrom``) therefore resolves with its source run's frozen
settings in place of today's defaults: only the fields it states differ, and what
:data:`FOLLOWS` derives from them. :func:`keep_frozen` writes those settings into the
branch's plan; :func:`akka_optimize.plan.resolve.resolve_plan` resolves the result.
"""

from __future__ import annotations

import json
from typing import Any

FOLLOWS: dict[str, tuple[str, ...]] = {
    "execution.gpus": (
        "execution.deviceProfile",
        "execution.memory.",
        "config.engineSettings.",
        "config.hyperparams.training.tokensPerGpu",
    ),
    "execution.hostMemoryGiB": ("execution.deviceProfile",),
    "execution.deviceProfile": ("config.hyperparams.training.tokensPerGpu",),
    "config.model.precision": ("config.engineSettings.dtypes.compute",),
}
"""A stated field → the resolved settings derived from it (a prefix ends in a dot), which
a branch resolves afresh instead of keeping its source's."""


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    return [(path, node)]


def _at(node: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def keep_frozen(
    raw: dict[str, Any], frozen: dict[str, Any], today: dict[str, Any], stated: list[str]
) -> dict[str, Any]:
    """``raw`` with every setting of ``frozen`` that ``raw`` does not state and that
    ``today`` gives another value.

    Only ``config`` and ``execution`` are kept; a null (a setting that does not apply) is
    not stated. The values kept are stated in the returned plan, so the plan rules check
    them against today's deployment like any stated value.

    Args:
        raw: the branch's plan as submitted (a JSON object; not modified).
        frozen: the source run's resolved plan (``runs get --settings``).
        today: the branch's plan resolved against today's deployment, before references
            are pinned (:func:`akka_optimize.plan.resolve.build_resolved`).
        stated: the dotted paths ``raw`` states (:func:`akka_optimize.plan.resolve.
            stated_paths`).

    Returns:
        A new plan object to parse and resolve in place of ``raw``.
    """
    follows = [d for s in stated for d in FOLLOWS.get(s, ())]
    out = json.loads(json.dumps(raw))
    for path, value in _leaves({k: frozen.get(k) for k in ("config", "execution")}):
        dotted = ".".join(path)
        if value is None or value == {} or _at(today, path) == value or dotted in stated:
            continue
        if any(d == dotted or (d.endswith(".") and dotted.startswith(d)) for d in follows):
            continue
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out
