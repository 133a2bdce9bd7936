"""Preference runs (``config.method: dpo``) as a kind of job (issue 50).

The kind reuses the supervised machinery: its spec is the supervised spec
(:func:`akka_optimize.jobs.mapping.build_spec`, whose engine settings come from
``config.dpoHyperparams``) with the preference loss in ``extra["dpo"]`` and whole replicas
on each rank (sharding ``none``: the reference pass disables the adapter on every rank's
own copy); its worker (:func:`akka_optimize.jobs.preference_training.train_dpo`) prepares
pairs and trains with :func:`akka_optimize.engine.dpo.loop.run_dpo`; ``save`` and
``completed`` are the supervised events, so the adapter registers as a model version with
``method: dpo`` (:func:`akka_optimize.jobs.results.complete`), and endpoints, evaluations,
comparisons and pipelines take it like any other. Warm starts (``warmStartModelId``, an SFT
model) and branches work as for a supervised run.

At acceptance (:func:`accept`, called by the dry run and the start alike) the training and
validation rows must be preference pairs whose sides render and keep the prompt-prefix
rule (:func:`akka_optimize.data.preference.encode_pairs`), on the findings' sample above its
bound; a refusal names ``config.dataset`` or ``config.data.validationDataset`` and the row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..catalog.cache import load_tokenizer, tokenizer_dir
from ..engine.dpo.loss import DpoSettings
from ..errors import AkkaError
from ..registry import resolve
from ..registry.datasets import dataset_rows_view
from .context import JobContext
from .kinds import JobKind, Launch
from .mapping import build_spec as supervised_spec
from .results import complete
from .saves import record_save
from .spec import JobSpec


def accept(ctx: JobContext, s: Session, f: dict[str, Any]) -> dict[str, Any]:
    """Check that the run's datasets hold trainable preference pairs (module docstring);
    nothing is pinned. Skipped while the base model's tokenizer is not at hand (the
    admission says why; the worker checks again).

    Raises:
        InvalidRequest: (``config.dataset`` / ``config.data.validationDataset``) a row that
            is not a pair, or whose side the template cannot render, named.
    """
    from ..data.findings import Picked, sample  # lazy: numpy
    from ..data.masks import naming_dataset  # lazy: numpy
    from ..data.preference import encode_pairs  # lazy: numpy

    try:
        tokenizer = load_tokenizer(tokenizer_dir(s, ctx.settings, f["base_model"]))
    except AkkaError:
        return {}
    for field, ref in (
        ("config.dataset", f["dataset"]),
        ("config.data.validationDataset", f["validation_dataset"]),
    ):
        if not ref:
            continue
        version = resolve(s, "dataset", ref, f["project"], field=field)
        rows: Any = dataset_rows_view(ctx.store, version, field=field)
        numbers: Any = range(1, len(rows) + 1)
        picked = sample(rows)
        if picked is not None:
            rows, numbers = Picked(rows, picked.indices), [i + 1 for i in picked.indices]
        try:
            encode_pairs(tokenizer, list(rows), list(numbers))
        except AkkaError as exc:
            raise naming_dataset(exc, field, version.pinned) from None  # type: ignore[arg-type]
    return {}


def build_spec(launch: Launch) -> JobSpec:
    """The supervised spec with the preference loss (``extra["dpo"]``) and whole replicas."""

    spec = supervised_spec(launch)
    hp = ((launch.run.resolved or {}).get("config") or {}).get("dpoHyperparams") or {}
    spec.extra["dpo"] = DpoSettings.from_plan(hp).to_dict()
    spec.engine["sharding"] = "none"
    return spec


PREFERENCE = JobKind(
    name="dpo",
    worker="akka_optimize.jobs.preference_training:train_dpo",
    build_spec=build_spec,
    events={"save": record_save, "completed": complete},
    accept=accept,
)
"""The preference kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""
