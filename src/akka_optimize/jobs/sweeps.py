"""Sweeps: one branch per point of a parameter grid from one source snapshot (seeds/000
"Parameter sweeps and run lineage", FEATURES F108).

``training runs sweep RUN --snapshot step-N --steps K --grid FILE [--dataset D]``
submits, for each grid point, the source run's own plan with the point's values set,
``branchFrom`` the snapshot and ``maxSteps`` ``N + K`` (``epochs`` raised to reach it),
so every branch trains the same ``K`` updates from the same state. ``--dataset`` makes
it the branches' validation dataset, so each one reports a validation loss to rank the
fan by. Every point is resolved and checked before any run is created: a bad point
refuses the whole sweep, naming the point and the field.

The grid file is JSON: an object of plan paths to lists of values (the sweep takes
every combination) or a list of objects of plan paths to values (one point each)::

    {"config.hyperparams.optimizer.learningRate": [1e-4, 2e-4, 5e-4]}
    [{"config.hyperparams.optimizer.learningRate": 1e-4, "config.hyperparams.lora.dropout": 0.1}]
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import AkkaError, InvalidRequest
from .admission import admit
from .branches import parse_snapshot
from .context import JobContext
from .fields import setting as _get
from .supervised import start_run

MAX_POINTS = 64
"""Most branches one sweep submits."""


def grid_points(grid: Any) -> list[dict[str, Any]]:
    """The points of a grid (see the module docstring), in file order.

    Raises:
        InvalidRequest: (field ``grid``) not an object of lists or a list of objects,
            empty, or more than :data:`MAX_POINTS` points.
    """
    if isinstance(grid, dict) and grid:
        for k, v in grid.items():
            if not isinstance(v, list) or not v:
                what = "an empty list" if isinstance(v, list) else f"{json.dumps(v)}, not a list"
                raise InvalidRequest(
                    f"grid: {k} is {what}; give the values to try as a list, e.g. "
                    f'{{"{k}": [0.0001, 0.0002]}}.',
                    field="grid",
                )
        keys = list(grid)
        points = [
            dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())
        ]
    elif isinstance(grid, list) and grid and all(isinstance(p, dict) and p for p in grid):
        points = [dict(p) for p in grid]
    else:
        raise InvalidRequest(
            "grid must be a JSON object of plan paths to lists of values, or a list of "
            'objects of plan paths to values, e.g. {"config.hyperparams.optimizer.'
            'learningRate": [0.0001, 0.0002]}.',
            field="grid",
        )
    if len(points) > MAX_POINTS:
        raise InvalidRequest(
            f"grid has {len(points)} points; a sweep submits at most {MAX_POINTS}.", field="grid"
        )
    return points


def _set(plan: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted plan path (``config.engineSettings.KEY`` keeps a dotted KEY whole)."""
    head, sep, key = path.partition("engineSettings.")
    parts = (head + "engineSettings").split(".") + [key] if sep else path.split(".")
    node = plan
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def branch_plans(
    source: Run, snapshot: str, steps: int, points: list[dict[str, Any]], dataset: str | None
) -> list[dict[str, Any]]:
    """One plan per point: the source's submitted plan, the point's values, branchFrom
    the snapshot, ``maxSteps`` snapshot + ``steps`` and enough epochs to reach it."""
    step = parse_snapshot(snapshot)
    if steps < 1:
        raise InvalidRequest(f"steps must be at least 1, not {steps}.", field="steps")
    target = step + steps
    training = _get(source.resolved, "config.hyperparams.training", {})
    epochs = int(training.get("epochs") or 1)
    per_update = int(training.get("microBatchPerGpu") or 1) * int(
        training.get("gradientAccumulation") or 1
    )
    examples = int(_get(source.results, "data.examples", 0))
    if examples:
        epochs = max(epochs, math.ceil(target / math.ceil(examples / per_update)))
    else:
        epochs = max(epochs, target)  # rows unknown: maxSteps bounds the run anyway
    plans = []
    for point in points:
        plan = copy.deepcopy(source.plan or {})
        plan.pop("submissionId", None)
        plan.pop("warmStartModelId", None)  # the branch starts from the snapshot instead
        _set(plan, "config.hyperparams.training.epochs", epochs)
        _set(plan, "config.hyperparams.training.maxSteps", target)
        if dataset:
            _set(plan, "config.data.validationDataset", dataset)
        for path, value in point.items():
            _set(plan, str(path), value)
        plan["branchFrom"] = {"run": source.id, "snapshot": f"step-{step}"}
        plans.append(plan)
    return plans


def submit_sweep(
    ctx: JobContext,
    session: Session,
    source: Run,
    *,
    snapshot: str,
    steps: int,
    grid: Any,
    dataset: str | None,
    resolve: Callable[[Any], Any],
    principal: Any = None,
) -> dict[str, Any]:
    """Resolve and check every point, then start one branch per point.

    Args:
        resolve: resolves and checks a raw plan (the service's plan resolution, which
            also checks ``branchFrom``); raises PlanRefused or InvalidRequest.

    Returns:
        ``{"source", "snapshot", "steps", "points": [{"point", "run"}]}``.

    Raises:
        InvalidRequest: a bad grid, or a point whose plan is refused (the sentence names
            the point); nothing is created.
    """

    points = grid_points(grid)
    resolved = []
    for i, plan in enumerate(branch_plans(source, snapshot, steps, points, dataset), start=1):
        try:
            r = resolve(plan)  # also checks the branch and any warm start
            admit(ctx, session, r)  # what start_run would refuse, before any is created
        except AkkaError as exc:
            raise InvalidRequest(
                f"grid point {i} {points[i - 1]}: {exc.message}", field=exc.field or "grid"
            ) from exc
        resolved.append(r)
    runs = [start_run(ctx, session, r, principal) for r in resolved]
    return {
        "source": source.id,
        "snapshot": f"step-{parse_snapshot(snapshot)}",
        "steps": steps,
        "points": [{"point": p, "run": r} for p, r in zip(points, runs, strict=True)],
    }
