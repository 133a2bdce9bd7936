"""The series of ``GET /metrics`` read from the state store at each scrape (issue 54
item 7; :mod:`.metrics` says why): what every API process over one store answers alike.

Runs by state and project; per pool its devices, those claimed, the items queued for it
and how long the oldest has waited (the capacity ledger's view, :mod:`akka_optimize.jobs
.capacity`); endpoints by state; and per run, while it is active or paused and for
:data:`RECENT_RUN_SECONDS` after it ends, its reported updates, the tokens it trained and
its latest tokens/s (the ``metrics`` rows its worker reported, engine/session/training.py
``optim_step``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run, RunMetric
from ..db.models.projects import Project
from ..db.models.serving import Endpoint
from ..deployment import Deployment
from ..jobs import states as S
from ..jobs.capacity.ledger import waiting
from ..jobs.capacity.usage import report

RECENT_RUN_SECONDS = 3600
"""How long after it ends a run keeps its own series (so its last values are scraped)."""


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


class StoreCollector(Collector):
    """Builds the store's series from one session (``s``) and the deployment (``dep``)
    when the registry is collected."""

    def __init__(self, s: Session, dep: Deployment) -> None:
        self.s, self.dep = s, dep

    def collect(self) -> Iterator[Metric]:
        """The series (module docstring); reads the store, writes nothing."""
        yield from self._runs()
        yield from self._pools()
        yield from self._endpoints()
        yield from self._per_run()

    def _runs(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "akka_optimize_runs",
            "Runs (evaluations and comparisons included) by state and project.",
            labels=["state", "project", "method"],
        )
        rows = self.s.execute(
            select(Run.state, Run.project, Run.method, func.count()).group_by(
                Run.state, Run.project, Run.method
            )
        )
        for state, project, method, n in rows:
            g.add_metric([state, project, method], n)
        yield g

    def _pools(self) -> Iterator[Metric]:
        pools = report(self.s, self.dep)["pools"]
        now = utcnow()
        oldest: dict[str, float] = {}
        for c in waiting(self.s, self.dep):
            for pool in c.devices:
                age = (now - _aware(c.since)).total_seconds()
                oldest[pool] = max(oldest.get(pool, 0.0), age)
        specs = [
            ("akka_optimize_pool_devices", "Devices the deployment declares in the pool.", "declared"),
            ("akka_optimize_pool_devices_claimed", "Devices claimed now by runs and endpoints.", "inUse"),
            ("akka_optimize_pool_queue_length", "Runs and endpoints waiting for the pool's devices.", "waiting"),
        ]  # fmt: skip
        for name, text, key in specs:
            g = GaugeMetricFamily(name, text, labels=["pool"])
            for p in pools:
                g.add_metric([p["name"]], p[key])
            yield g
        g = GaugeMetricFamily(
            "akka_optimize_pool_queue_oldest_wait_seconds",
            "How long the oldest item waiting for the pool has waited (0: none waits).",
            labels=["pool"],
        )
        for p in pools:
            g.add_metric([p["name"]], round(oldest.get(p["name"], 0.0), 3))
        yield g

    def _endpoints(self) -> Iterator[Metric]:
        names = {p.id: p.name for p in self.s.scalars(select(Project))}
        g = GaugeMetricFamily(
            "akka_optimize_endpoint_info",
            "1 per endpoint, with its project, base model and state.",
            labels=["endpoint", "project", "base_model", "state"],
        )
        for ep in self.s.scalars(select(Endpoint)):
            g.add_metric([ep.id, names.get(ep.project_id, ""), ep.base_model, ep.state], 1)
        yield g

    def _per_run(self) -> Iterator[Metric]:
        since = utcnow() - dt.timedelta(seconds=RECENT_RUN_SECONDS)
        runs = {
            r.id: r
            for r in self.s.scalars(
                select(Run).where(
                    or_(Run.state.in_([*S.ACTIVE, S.PAUSED]), Run.finished_at >= since)
                )
            )
        }
        labels = ["run", "project", "method"]
        updates = CounterMetricFamily(
            "akka_optimize_run_updates", "Updates the run's workers reported.", labels=labels
        )
        tokens = CounterMetricFamily(
            "akka_optimize_run_trained_tokens",
            "Tokens of the updates the run's workers reported (totalTokens summed).",
            labels=labels,
        )
        speed = GaugeMetricFamily(
            "akka_optimize_run_tokens_per_second",
            "Training tokens/s of the run's latest reported update.",
            labels=labels,
        )
        step = GaugeMetricFamily(
            "akka_optimize_run_step", "The run's current update and its total.", labels=labels
        )
        total = GaugeMetricFamily(
            "akka_optimize_run_total_steps", "Updates the run will make.", labels=labels
        )
        sums = self._sums(list(runs))
        for rid, run in runs.items():
            key = [rid, run.project, run.method]
            n, trained, latest = sums.get(rid, (0, 0.0, None))
            updates.add_metric(key, n)
            tokens.add_metric(key, trained)
            speed.add_metric(key, float(latest or 0.0))
            step.add_metric(key, run.current_step or 0)
            if run.total_steps:
                total.add_metric(key, run.total_steps)
        yield from (updates, tokens, speed, step, total)

    def _sums(self, ids: list[str]) -> dict[str, tuple[int, float, Any]]:
        """Per run: reported updates, summed totalTokens, the latest row's tokensPerSecond."""
        if not ids:
            return {}
        m = RunMetric
        rows = self.s.execute(
            select(m.run_id, func.count(), func.sum(m.values["totalTokens"].as_float()))
            .where(m.run_id.in_(ids), m.kind == "metrics")
            .group_by(m.run_id)
        )
        out: dict[str, tuple[int, float, Any]] = {r: (n, float(t or 0.0), None) for r, n, t in rows}
        last = (
            select(m.run_id, func.max(m.id).label("id"))
            .where(m.run_id.in_(ids), m.kind == "metrics")
            .group_by(m.run_id)
            .subquery()
        )
        for rid, values in self.s.execute(select(m.run_id, m.values).join(last, m.id == last.c.id)):
            n, t, _ = out[rid]
            out[rid] = (n, t, (values or {}).get("tokensPerSecond"))
        return out


def store_registry(s: Session, dep: Deployment) -> CollectorRegistry:
    """A registry of one :class:`StoreCollector` over ``s`` (built per scrape)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(s, dep))
    return reg
