"""``runs sweep … --compare``: the source snapshot against every branch, as one comparison
(seeds/000 "Parameter sweeps and run lineage"; FEATURES F108; issue 17 item 5).

:func:`start_sweep_comparison` records, in the sweep's own transaction, one comparison job
(method ``compare``, ``resolved.kind`` ``sweep``) that waits ``QUEUED`` until every branch
has ended (the scheduler's ``resolved.after``). At launch its sides are settled
(:func:`akka_optimize.evals.kind.sweep_sides`): the source snapshot's adapter (read from
the blob store as the run saved it; it need not be registered) and each branch that
succeeded, as the model it registered. Every side answers every row on one engine, one
grader scores every answer, and each branch gets its mean, standard error and its wins,
losses, ties and paired difference against the source (``fan``, best mean first); a branch
that failed or was cancelled is listed in ``leftOut``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, Snapshot
from ..errors import InvalidRequest
from ..jobs import states as S
from ..jobs.context import JobContext
from ..jobs.scheduler import wake
from .kind import COMPARE, MAX_ERROR_SHARE, check_scoring, comparison_view, serving_precision


def start_sweep_comparison(
    ctx: JobContext,
    s: Session,
    source: Run,
    step: int,
    points: list[dict[str, Any]],
    *,
    dataset: str,
    grader: str,
    grader_instructions: str | None,
    sampling: dict[str, Any],
    device_kind: str,
    resolve: Any,
) -> dict[str, Any]:
    """Record the comparison of a sweep with ``compare`` (see the module docstring).

    Args:
        source: the sweep's source run; ``step`` its snapshot.
        points: the sweep's ``points`` (``{"point", "run"}``, each run's view with its ``id``).
        dataset / grader / grader_instructions / sampling: what the sides are scored with
            (checked by :func:`akka_optimize.evals.kind.check_scoring`, as an evaluation's).
        resolve: ``resolve(kind, ref, field=...)`` in the source run's project.

    Raises:
        InvalidRequest: (``snapshot``) the snapshot keeps no adapter; (``grader``,
            ``dataset``…) as an evaluation's request is refused. Nothing is created: the
            caller's transaction holds the branches too.
    """
    snap = s.scalar(select(Snapshot).where(Snapshot.run_id == source.id, Snapshot.step == step))
    if snap is None or not snap.adapter_key:
        raise InvalidRequest(
            f"compare: snapshot step-{step} of run {source.id} keeps no adapter to score "
            "(only the newest execution.keepAdapters saves keep one); pick a snapshot that "
            "`training runs snapshots` shows with an adapter.",
            field="snapshot",
        )
    sc = check_scoring(ctx, s, grader, grader_instructions, dataset, resolve)
    branches = [{"run": p["run"]["id"], "point": p["point"]} for p in points]
    resolved = _resolved(source, step, snap.adapter_key, branches, sc, sampling)
    resolved["precision"] = serving_precision(ctx)
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=source.project,
        method=COMPARE,
        state=S.QUEUED,
        plan={"sweep": source.id, "snapshot": f"step-{step}", "compare": True},
        resolved=resolved,
        config_hash=digest,
        base_model=source.base_model,
        dataset=sc.dataset.pinned,
        validation_dataset=None,
        model_name=resolved["model"],
        device_kind=device_kind,
        gpus=0,
        total_steps=len(sc.rows) * (1 + len(branches)),
        results={},
        queue_reason=f"waiting for the sweep's {len(branches)} branches to finish",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return comparison_view(s, run)


def _resolved(
    source: Run,
    step: int,
    adapter_key: str,
    branches: list[dict[str, Any]],
    sc: Any,
    sampling: dict[str, Any],
) -> dict[str, Any]:
    """The comparison's resolved request (hashed into its ``config_hash``): the source
    snapshot as the first side, the branches scored after it, the pinned dataset and
    grader, the sampling settings and the error-share limit."""
    label = f"{source.id}@step-{step}"
    return {
        "kind": "sweep",
        "project": source.project,
        "modelId": label,
        "model": f"run {source.id[:8]} step-{step}",
        "modelSource": "snapshot",
        "source": source.id,
        "snapshot": f"step-{step}",
        "sides": [
            {
                "modelId": label,
                "model": f"run {source.id[:8]} step-{step}",
                "modelSource": "snapshot",
                "adapterKey": adapter_key,
            }
        ],
        "branches": branches,
        "after": [b["run"] for b in branches],
        "baseModel": source.base_model,
        "dataset": sc.dataset.pinned,
        "datasetRows": len(sc.rows),
        "grader": sc.grader(),
        "graderInstructions": sc.instructions,
        "instructionsSource": sc.source,
        "sampling": sampling,
        "limit": None,
        "maxErrorShare": MAX_ERROR_SHARE,
    }
