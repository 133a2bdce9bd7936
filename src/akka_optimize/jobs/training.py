"""What a worker does for a supervised run: prepare rows, train, upload saves.

The ``sft`` kind's worker function (:mod:`akka_optimize.jobs.supervised`), kept apart
from :mod:`akka_optimize.jobs.worker` (process plumbing) so it reads top to bottom:
settings → rows → examples → engine → saves → result.
"""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path
from typing import Any

from ..data.policy import LossPolicy
from ..data.prepared.rows import check_prepared
from ..engine.check_prompts import CHECK_PROMPTS, stop_token_ids
from ..errors import InvalidRequest
from ..refs import parse_ref
from ..store import BlobStore
from ..testhooks import hold
from .blobs import download_prefix, upload_dir
from .spec import JobSpec


def spec_version(kind: str, record: dict[str, Any]) -> Any:
    """A :class:`ResolvedVersion` from its API record (a job spec holds records)."""
    from ..registry import ResolvedVersion  # lazy: sqlalchemy

    ref = parse_ref(record["ref"])
    return ResolvedVersion(
        kind=kind,
        namespace=ref.namespace,
        name=ref.name,
        version=ref.version or 0,
        digest=record["digest"],
        pinned=record["ref"],
        metadata=record.get("metadata") or {},
        created_at=None,
        files=record.get("files") or {},
    )


def load_rows(store: BlobStore, record: dict[str, Any]) -> list[dict[str, Any]]:
    from ..registry import load_dataset_rows  # lazy: sqlalchemy

    return load_dataset_rows(store, spec_version("dataset", record))


def first_system_message(rows: list[dict[str, Any]]) -> str | None:
    """The model's training instructions: the first system message of its training data."""
    for row in rows:
        for m in row.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "system":
                c = m.get("content")
                if isinstance(c, list):
                    c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
                return c if isinstance(c, str) and c else None
    return None


def _is_prepared(record: dict[str, Any] | None) -> bool:
    return bool(record) and (record.get("metadata") or {}).get("format") == "prepared"


def _prepared_set(
    store: BlobStore, record: dict[str, Any], tokenizer: Any, max_seq_length: int
) -> Any:
    """A prepared dataset's examples, trained as given (F029): the tokens and masks as
    registered, checked again against the base model's tokenizer and ``maxSeqLength``
    (F030; the start checked them from the version's metadata)."""
    from ..data.masks import Prepared, examples_report  # lazy: numpy
    from ..registry import load_prepared_examples  # lazy: sqlalchemy

    header, examples = load_prepared_examples(store, spec_version("dataset", record))
    check_prepared(header, tokenizer, max_seq_length)
    return Prepared(examples, examples_report(len(examples), examples, max_seq_length))


class CancelledWhileTokenizing(Exception):
    """The service asked the attempt to cancel while it tokenized its rows (F071)."""


def tokenizing_progress(events: Any, total: int) -> Any:
    """The ``progress`` callback of :func:`akka_optimize.data.masks.prepare_examples`: sends
    a PREPARING phase event with ``rowsDone`` and ``rowsTotal`` (seeds/001 "PREPARING shows
    completed and total row counts") and raises :class:`CancelledWhileTokenizing` once the
    service's answer asks to cancel, so a cancel stops tokenizing before any update."""

    def progress(done: int) -> None:
        events.send(
            {
                "type": "phase",
                "phase": "PREPARING",
                "detail": f"tokenizing rows: {done} of {total} done",
                "rowsDone": done,
                "rowsTotal": total,
            }
        )
        hold(f"tokenized-{done}")  # tests only: stop at a known row count
        if events.control == "cancel":
            raise CancelledWhileTokenizing

    return progress


def prepare(spec: JobSpec, store: BlobStore, events: Any) -> tuple[list, Any, Any]:
    """Rows, tokenized training set and validation set (or None), with their phase events.

    A dataset of prepared token rows gives no rows (``[]``) and its examples as given; rows
    a preparation attempt stored (``spec.extra["prepared_rows"]``) are read as stored."""
    from transformers import AutoTokenizer

    from ..data.masks import naming_dataset, prepare_examples  # lazy: numpy
    from .trainable import image_inputs  # lazy: sqlalchemy

    stored = spec.extra.get("prepared_rows")
    if stored and Path(stored).is_file():  # tokenized before the claim (jobs/preparation.py, F071)
        events.send({"type": "phase", "phase": "PREPARING", "detail": "reading tokenized rows"})
        with open(stored, "rb") as f:
            return pickle.load(f)  # written for this run by prepare_rows  # noqa: S301
    events.send({"type": "phase", "phase": "PREPARING", "detail": "reading the dataset"})
    tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
    images = image_inputs(store, Path(spec.model_dir), Path(spec.model_dir).name)
    if _is_prepared(spec.dataset):
        rows: list[dict[str, Any]] = []
        train_set = _prepared_set(store, spec.dataset, tokenizer, spec.max_seq_length)
    else:
        rows = load_rows(store, spec.dataset)
        progress = tokenizing_progress(events, len(rows))
        progress(0)
        policy = LossPolicy.from_config(spec.loss)
        train_set = prepare_examples(
            tokenizer, rows, policy, spec.max_seq_length, spec.on_too_long, None, progress, images
        )
    val_set = None
    if _is_prepared(spec.validation_dataset):
        val_set = _prepared_set(store, spec.validation_dataset, tokenizer, spec.max_seq_length)
    elif spec.validation_dataset:
        val_rows = load_rows(store, spec.validation_dataset)
        policy = LossPolicy.from_config(spec.loss)
        try:
            val_set = prepare_examples(
                tokenizer, val_rows, policy, spec.max_seq_length, "drop", images=images
            )
        except InvalidRequest as exc:  # its rows, not the training dataset's (issue 47)
            field = "config.data.validationDataset"
            raise naming_dataset(exc, field, spec.validation_dataset) from exc
    events.send(
        {
            "type": "data",
            "train": train_set.report,
            "validation": val_set.report if val_set else None,
        }
    )
    return rows, train_set, val_set


def starting_state(
    spec: JobSpec, store: BlobStore, work: Path, state_dir: Path
) -> tuple[int | None, Path | None]:
    """The step a resumed attempt starts from (its state downloaded into ``state_dir``) and
    the warm-start adapter folder of a fresh one; each None when it does not apply."""
    from ..engine.sft import state_path  # lazy: torch

    resume_step = None
    if spec.resume_state_key:
        if state_dir.exists():
            shutil.rmtree(state_dir)
        download_prefix(
            store, spec.resume_state_key, state_path(state_dir, spec.resume_step or 0) / "state"
        )
        resume_step = spec.resume_step
    warm_dir = None
    if spec.warm_start and resume_step is None:  # a resumed attempt has its own state
        from ..registry import download_model_files  # lazy: guarded

        warm_dir = download_model_files(
            store, spec_version("model", spec.warm_start), work / "warm-start"
        )
    return resume_step, warm_dir


def uploading(spec: JobSpec, store: BlobStore, events: Any, speed: dict[str, float]) -> Any:
    """The engine's event callback: uploads each save to the store (the event then names
    blob keys, not local folders), sums tokens and step time into ``speed``, and sends."""

    def emit(event: dict[str, Any]) -> None:
        if event.get("type") == "metrics":
            hold(f"step-{event['step']}")  # tests only: stop at a known update
            speed["tokens"] += int(event.get("totalTokens") or 0)
            speed["seconds"] += float(event.get("stepTimeSeconds") or 0.0)
        if event.get("type") == "save" and event.get("stateDir"):
            step = event["step"]
            prefix = f"{spec.state_prefix}/step-{step}"
            try:
                sb, ab = commit_save(
                    store, event, prefix, float(spec.extra.get("save_retry_s", SAVE_COMMIT_S))
                )
            except OSError as exc:  # the run goes on; the save is named as unrecorded
                event = unrecorded_save(step, exc)
            else:
                event = {k: v for k, v in event.items() if k not in ("stateDir", "adapterDir")}
                event.update(
                    stateKey=f"{prefix}/state",
                    adapterKey=f"{prefix}/adapter" if ab else None,
                    stateBytes=sb,
                    adapterBytes=ab,
                )
        events.send(event)

    return emit


SAVE_COMMIT_S = 900.0
"""How long a save's upload is retried (seconds) before it is reported unrecorded and the
run goes on (seeds/001: saves commit "or their commit has failed, waiting at most 15
minutes"; F074)."""


def commit_save(
    store: BlobStore, event: dict[str, Any], prefix: str, retry_s: float
) -> tuple[int, int]:
    """Upload a save's state (and adapter, when there is one) under ``prefix``, retrying
    store errors with backoff for ``retry_s`` seconds; returns (state bytes, adapter
    bytes). A half-written save is deleted before each retry and after the last failure.

    Raises:
        OSError: the store still refused after ``retry_s`` seconds (the last error).
    """
    deadline = time.monotonic() + retry_s
    delay = 1.0
    while True:
        try:
            sb = upload_dir(store, Path(event["stateDir"]), f"{prefix}/state")
            ab = 0
            if event.get("adapterDir") and Path(event["adapterDir"]).exists():
                ab = upload_dir(store, Path(event["adapterDir"]), f"{prefix}/adapter")
            return sb, ab
        except OSError:
            for key in _keys_under(store, prefix):
                store.delete(key)
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 60.0)


def _keys_under(store: BlobStore, prefix: str) -> list[str]:
    try:
        return store.list(prefix)
    except OSError:
        return []


def unrecorded_save(step: int, exc: BaseException) -> dict[str, Any]:
    """The warning event of a save whose upload failed (code ``unrecorded_save``); the
    service lists its step in the run's ``unrecordedSaves`` (F074)."""
    return {
        "type": "warning",
        "code": "unrecorded_save",
        "step": step,
        "message": f"The save at step {step} could not be written to the blob store and was "
        f"not recorded ({type(exc).__name__}: {exc}); the run goes on from its memory, and "
        "a resume starts from an earlier save.",
    }


def stop_event(events: Any, result: Any) -> dict[str, Any] | None:
    """The final event of an attempt the service stopped: ``cancelled``, or ``paused`` at
    the engine's last step; None when it ran to the end."""
    if events.control == "cancel":
        return {"type": "cancelled"}
    if result.stopped:
        return {"type": "paused", "step": result.step}
    return None


def result_fields(result: Any) -> dict[str, Any]:
    """The ``completed`` result fields every training loop reports."""
    return {
        "step": result.step,
        "totalSteps": result.total_steps,
        "finalLoss": result.final_loss,
        "meanLoss": result.mean_loss,
    }


def answering(instructions: str | None, into: dict[str, Any], until: Any = None) -> Any:
    """The engine's ``until`` callback (:func:`akka_optimize.engine.sft.run_sft`, called
    after each update, before its save) that also takes, after the last update (or the
    one ``until`` ends the run at), the trained adapter's greedy answers to the served =
    trained check's prompts (:mod:`akka_optimize.engine.check_prompts`), put as an
    endpoint puts them (the model's training ``instructions`` as the system message):
    in this process, from the adapter in memory, before it is saved. Fills ``into``
    (the run's ``trainedAnswers``) with ``prompts``, ``instructions``, ``answers`` (the
    text an endpoint serving the run's model must answer alike), ``tokens`` (each
    answer's ids, a stop id last when it stopped) and ``logprobs`` (the log-probability
    of each of those tokens, fp32 nats, with the adapter as trained); on several ranks it
    leaves ``into`` empty (the adapter is sharded). Returns what ``until`` returns
    (False without one)."""

    def check(session: Any, update: int, total: int) -> bool:
        done = bool(until is not None and until(session, update, total))
        if (done or update == total) and session.world == 1:
            into.update(_trained_answers(session, instructions))
        return done

    return check


def _trained_answers(session: Any, instructions: str | None) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from ..engine.sampling import answer_logprobs, answer_text, check_answer_ids  # lazy: torch

    tok = AutoTokenizer.from_pretrained(session.model_dir)
    gen = getattr(session.model, "generation_config", None)
    stops = stop_token_ids(tok, gen.to_dict() if gen is not None else None)
    with session.compute_context():
        pairs = check_answer_ids(session.model, tok, stops, instructions=instructions)
        logprobs = [answer_logprobs(session.model, p, a) for p, a in pairs]
    return {
        "prompts": list(CHECK_PROMPTS),
        "instructions": instructions,
        "answers": [answer_text(tok, a, stops) for _, a in pairs],
        "tokens": [a for _, a in pairs],
        "logprobs": logprobs,
    }


def train(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """Train one attempt; returns the final event (``completed``, ``paused`` or ``cancelled``)."""
    from ..engine import distributed  # lazy: torch

    ranks = int(spec.engine.get("ranks", 1))
    distributed.init_ranks(ranks, spec.device)  # several devices: every rank joins first
    try:
        return _train(spec, store, events, work)
    finally:
        distributed.finish_ranks()


def _prepared_or_cancelled(spec: JobSpec, store: BlobStore, events: Any) -> tuple | None:
    """:func:`_prepare`, or None when the service cancelled while it tokenized (on several
    ranks: when rank 0 heard the cancel, so every rank stops)."""
    from ..engine.distributed import any_rank, world  # lazy: torch

    try:
        prepared = prepare(spec, store, events)
    except CancelledWhileTokenizing:
        prepared = None
    if world()[1] > 1 and any_rank(prepared is None):
        return None
    return prepared


def _train(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    from ..engine.config import EngineConfig  # lazy: torch
    from ..engine.sft import run_sft  # lazy: torch

    prepared = _prepared_or_cancelled(spec, store, events)
    if prepared is None:
        return {"type": "cancelled"}
    rows, train_set, val_set = prepared
    cfg = EngineConfig(**spec.engine)
    examples = train_set.examples
    state_dir = work / "state"
    resume_step, warm_dir = starting_state(spec, store, work, state_dir)
    speed = {"tokens": 0, "seconds": 0.0}
    emit = uploading(spec, store, events, speed)
    meter = None
    if spec.extra.get("smoke"):  # a smoke run: its slice, until reproduced (engine/smoke.py)
        # lazy: guarded
        from ..engine.smoke import SmokeCheck, SmokeMeter, smoke_config, smoke_slice

        check = SmokeCheck.from_plan(spec.extra["smoke"])
        examples = smoke_slice(examples, check)
        cfg = smoke_config(cfg, len(examples), check)
        meter = SmokeMeter(examples, check, emit)
    events.send({"type": "phase", "phase": "RUNNING", "detail": "training"})
    instructions = first_system_message(rows)
    trained: dict[str, Any] = {}
    result = run_sft(
        cfg,
        Path(spec.model_dir),
        examples,
        val_set.examples if val_set else None,
        state_dir,
        emit,
        resume_step=resume_step,
        branch=spec.branch_origin,
        init_adapter=warm_dir,
        should_stop=lambda: events.control in ("pause", "cancel"),
        until=answering(instructions, trained, meter),
    )
    stopped = stop_event(events, result)
    if stopped is not None:
        return stopped
    out = {
        **result_fields(result),
        "validationLoss": result.final_validation_loss,
        "adaptedModules": result.adapted_modules,
        "totalTokens": speed["tokens"],
        "tokensPerSecond": round(speed["tokens"] / speed["seconds"], 1)
        if speed["seconds"]
        else None,
        "instructions": instructions,
        "trainedAnswers": trained or None,
    }
    if result.checks is not None:  # the checks before the first update (runs get --checks)
        out["checks"] = result.checks
        out["checksPassed"] = all(c["passed"] for c in result.checks)
    if meter is not None:
        out["smoke"] = meter.reading()
    return {"type": "completed", "result": out}
