"""Admission's check that a supervised run's rows train (issue 47 "Accepted means honoured").

The worker tokenizes a run's dataset and validation dataset with
:func:`akka_optimize.data.masks.prepare_examples` and fails the run when a row cannot be
rendered by the base model's chat template (tool rows on a template without tools, image
rows on a text-only model), when a row is too long under ``onTooLong: refuse``, or when no
row supervises a token (a validation dataset of prompt-only rows). Admission asks the same
question with :func:`akka_optimize.data.masks.check_trainable`, which raises what
``prepare_examples`` would, so the dry run and the start refuse such a plan, naming the
dataset's field and reference, before anything is created or claimed.

Above the dry run's stated bound (:func:`akka_optimize.data.findings.sample`) the rows
checked are the findings' seeded sample, so a dry run and a start answer within seconds at
the upload limit (issue 48 item 8); the findings' ``sampled`` field says so, and a row
outside the sample that cannot train fails the run when it prepares, naming the row.

The answer is cached per dataset version, tokenizer folder, loss policy, ``maxSeqLength``
and ``onTooLong``, so a dry run and the start that follows tokenize the rows once.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..catalog.cache import load_tokenizer, tokenizer_dir
from ..data.policy import LossPolicy
from ..data.vision import ImageInputs
from ..errors import AkkaError, InvalidRequest
from ..registry import is_prepared, resolve
from ..registry.datasets import dataset_rows_view
from ..registry.images import image_bytes
from .context import JobContext

_CACHE: dict[tuple, InvalidRequest | None] = {}
_CACHE_SIZE = 32
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8)
def _processor(path: str, _mtime: float) -> Any:
    from ..data.processors import load_processor  # lazy: transformers

    return load_processor(Path(path))


def image_inputs(store: Any, model_dir: Path, model: str) -> Any:
    """The :class:`akka_optimize.data.vision.ImageInputs` of base model ``model`` (its
    folder ``model_dir``): its processor (None for a text-only model, cached while the
    folder is unchanged, loaded at the first image row) and the registry's stored images. The worker, the dry run's
    findings and admission's check use the same one (F031)."""

    mtime = model_dir.stat().st_mtime
    loader = functools.partial(_processor, str(model_dir), mtime)
    return ImageInputs(model, loader, functools.partial(image_bytes, store))


def check_rows(
    tokenizer: Any, rows: Any, policy: Any, length: int, on: str, images: Any = None
) -> None:
    """Raise what the worker's preparation raises for ``rows`` (a dataset's rows view), on
    every row up to the findings' stated bound and on their seeded sample above it
    (:func:`akka_optimize.data.findings.sample`), naming the dataset's own row numbers.

    Raises:
        RenderError, InvalidRequest: as :func:`akka_optimize.data.masks.check_trainable`.
    """
    from ..data.findings import Picked, sample  # lazy: numpy
    from ..data.masks import check_trainable  # lazy: numpy

    picked = sample(rows)
    numbers = None
    if picked is not None:
        rows, numbers = Picked(rows, picked.indices), [i + 1 for i in picked.indices]
    check_trainable(tokenizer, rows, policy, length, on, numbers, images)  # type: ignore[arg-type]


def _refusal(
    ctx: JobContext,
    version: Any,
    tokenizer_path: Path,
    policy: Any,
    length: int,
    on: str,
    model: str,
):
    """The refusal :func:`check_trainable` gives ``version``'s rows, or None (cached while
    the tokenizer folder is unchanged; the oldest answer goes past ``_CACHE_SIZE``)."""

    mtime = tokenizer_path.stat().st_mtime
    key = (version.pinned, str(tokenizer_path), mtime, policy, length, on, model)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    rows = dataset_rows_view(ctx.store, version)
    refusal = None
    try:
        images = image_inputs(ctx.store, tokenizer_path, model)
        check_rows(load_tokenizer(tokenizer_path), rows, policy, length, on, images)
    except InvalidRequest as exc:
        refusal = exc
    with _LOCK:
        _CACHE[key] = refusal
        while len(_CACHE) > _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
    return refusal


def rows_refusal(ctx: JobContext, session: Session, f: dict[str, Any]) -> AkkaError | None:
    """The refusal of a supervised run (fields ``f`` of :func:`akka_optimize.jobs.mapping.
    job_fields`) whose dataset or validation dataset the worker could not train, naming
    the field (``config.dataset``, ``config.data.validationDataset``) and the version; None
    when both train, for other methods, for prepared token rows (checked by admission's
    ``_prepared``), and while the base model is not READY (its tokenizer is not at hand:
    admission's ``_base_model`` says why, or the worker checks when it is).
    """
    from ..data.masks import naming_dataset  # lazy: numpy

    if f["method"] != "sft":
        return None
    try:
        path = tokenizer_dir(session, ctx.settings, f["base_model"])
    except AkkaError:
        return None
    cfg = f["resolved"]["config"]
    policy = LossPolicy.from_config(cfg.get("loss") or {})
    length = int(cfg["maxSeqLength"])
    on_too_long = str((cfg.get("data") or {}).get("onTooLong") or "drop")
    todo = [
        ("config.dataset", f["dataset"], on_too_long),
        ("config.data.validationDataset", f["validation_dataset"], "drop"),  # as the worker
    ]
    for field, ref, on in todo:
        if not ref:
            continue
        try:
            version = resolve(session, "dataset", ref, f["project"])
            if is_prepared(version):
                continue
            exc = _refusal(ctx, version, path, policy, length, on, f["base_model"])
        except AkkaError as err:  # a missing blob: the refusal the dry run's findings give
            return err
        if exc is not None:
            return naming_dataset(exc, field, version.pinned)
    return None
