"""Rows → :class:`~akka_optimize.data.types.Example`: tokens of the rendered text and weights.

Token ids are exactly ``apply_chat_template(messages, tools=tools, tokenize=True)``: the
rendered text tokenized with ``add_special_tokens=False`` (one BOS if the template writes
one, never a second from the tokenizer). Weights come from the trained character intervals
of :func:`akka_optimize.data.render.render_row` mapped to tokens through the fast
tokenizer's offsets, never by searching token ids:

* a token trains only when all its characters lie inside one trained interval, so a token
  straddling a boundary between parts with different flags is masked
  (DATA-AND-TRAINING-RULES.md §2.1);
* characters a tokenizer leaves out of every offset (a leading space some tokenizers trim)
  count as part of the following token, so trimming cannot make a straddling token look
  contained;
* ``weights[0]`` is 0 (nothing predicts the first token; see ``data.types``).

Rows are tokenized in batches (the Rust tokenizer, offsets included) for speed.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from akka_optimize import cancel
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import Rendered, RenderError, prompt_mismatches, render_rows
from akka_optimize.data.types import Example
from akka_optimize.data.vision import ImageInputs, expand_all, text_rows
from akka_optimize.errors import InvalidRequest

log = logging.getLogger(__name__)
BATCH_ROWS = 256


def require_fast(tokenizer: Any) -> None:
    """Raise unless ``tokenizer`` gives character offsets (a fast tokenizer)."""
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidRequest(
            "the base model's tokenizer is not a fast tokenizer, so loss masks cannot be mapped "
            "from characters to tokens; provide its tokenizer.json",
            field="baseModel",
        )
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequest("the base model's tokenizer has no chat template", field="baseModel")


def weights_from_offsets(offsets: Any, trained: list[tuple[int, int]]) -> list[float]:
    """One weight per token: 1.0 when the token lies wholly inside a trained interval.

    Args:
        offsets: ``(L, 2)`` character ``(start, end)`` of each token.
        trained: sorted, disjoint ``(start, end)`` character intervals.

    Returns:
        ``L`` floats in {0.0, 1.0}; the first is always 0.0.
    """
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    n = len(offs)
    if n == 0 or not trained:
        return [0.0] * n
    s, e = offs[:, 0], offs[:, 1]
    prev_end = np.concatenate([s[:1], e[:-1]])
    start = np.minimum(s, prev_end)
    starts = np.fromiter((a for a, _ in trained), dtype=np.int64)
    ends = np.fromiter((b for _, b in trained), dtype=np.int64)
    idx = np.searchsorted(starts, start, side="right") - 1
    ok = (idx >= 0) & (e > s) & (e <= ends[np.clip(idx, 0, None)])
    ok &= start >= starts[np.clip(idx, 0, None)]
    w = ok.astype(np.float64)
    w[0] = 0.0
    return w.tolist()


@dataclass
class Encoded:
    """A tokenized row with its rendering (for previews and findings)."""

    example: Example
    rendered: Rendered
    offsets: list[tuple[int, int]]


def encode_rows(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    policy: LossPolicy,
    row_numbers: list[int],
    errors: list[RenderError] | None = None,
    progress: Callable[[int], None] | None = None,
    images: ImageInputs | None = None,
) -> list[Encoded]:
    """Render, tokenize (in batches of ``BATCH_ROWS``) and mask ``rows``.

    Args:
        errors: when given, rows the template cannot render are appended here and left
            out of the result instead of raising.
        images: the base model's processor for image rows (:mod:`akka_optimize.data.
            vision`; an image row's example then has the image tokens and ``vision``), or
            its absence (a text-only model refuses them naming the model); None refuses
            image rows without a model to name.
        progress: called after each batch with the number of rows done so far (the
            PREPARING counts of seeds/001); an exception it raises stops tokenizing.

    Raises:
        RenderError: a row the template cannot render correctly (row number, what was
            dropped), unless ``errors`` collects it.
    """
    require_fast(tokenizer)
    _refuse_pairs(rows, row_numbers)
    out: list[Encoded] = []
    backend = tokenizer.backend_tokenizer
    # what tokenizer(text) does by default: no truncation, no padding (an earlier call may
    # have left either set on the shared Rust tokenizer)
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    for b in range(0, len(rows), BATCH_ROWS):
        cancel.check()  # a dry run or preview whose client left stops here
        given = rows[b : b + BATCH_ROWS]
        batch_rows, numbers = text_rows(given, row_numbers[b : b + BATCH_ROWS], images, errors)
        rendered = render_rows(tokenizer, batch_rows, policy, numbers, errors)
        kept = [(r, n) for r, n in zip(rendered, numbers, strict=True) if r is not None]
        # the Rust tokenizer directly: the same ids as tokenizer(text, add_special_tokens=False)
        texts = [r.text for r, _ in kept]
        encodings = backend.encode_batch(texts, add_special_tokens=False) if texts else []
        batch = [
            Encoded(
                Example(list(enc.ids), weights_from_offsets(enc.offsets, r.trained), n),
                r,
                enc.offsets,
            )
            for enc, (r, n) in zip(encodings, kept, strict=True)
        ]
        batch = _without_mismatched_turns(tokenizer, batch_rows, numbers, batch, policy, errors)
        by_number = dict(zip(row_numbers[b : b + BATCH_ROWS], given, strict=True))
        out += expand_all(images, by_number, batch, errors)
        if progress is not None:
            progress(min(b + BATCH_ROWS, len(rows)))
    return out


def _refuse_pairs(rows: Sequence[dict[str, Any]], numbers: Sequence[int]) -> None:
    """A preference pair among conversation rows is refused naming its row: a preference
    dataset trains with ``config.method: dpo`` (:mod:`akka_optimize.data.preference`)."""
    for row, n in zip(rows, numbers, strict=False):
        if "messages" not in row and "chosen" in row:
            raise InvalidRequest(
                f"row {n} is a preference pair (prompt, chosen, rejected); a supervised run "
                "trains conversations. Train preference pairs with config.method dpo.",
                field=f"row {n}",
                code="preference_rows",
            )


def _without_mismatched_turns(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    numbers: list[int],
    encoded: list[Encoded],
    policy: LossPolicy,
    errors: list[RenderError] | None,
) -> list[Encoded]:
    """``encoded`` less the rows with a trained assistant turn that is not trained on the
    tokens an endpoint generates it from (DATA-AND-TRAINING-RULES.md §2, serving =
    training; issue 15 item 5 and issue 47 item 13): for every trained turn, a single
    turn included, the conversation before it rendered with the generation prompt (as an
    endpoint renders a request) must be a token prefix of the row's tokens, and so must the
    conversation ending with the turn (a template that writes the turn otherwise once later
    turns follow). A completion starting with whitespace that merges with the generation
    prompt's last token, or a template whose generation prompt differs from what history
    renders, fails the first. Such a row is refused naming row, turn and the first
    differing token (:func:`akka_optimize.data.prompt_checks.prompt_mismatches`).

    Raises:
        RenderError: the first such row, unless ``errors`` collects them.
    """
    if not encoded:
        return encoded
    by_number = dict(zip(numbers, rows, strict=True))
    found = prompt_mismatches(
        tokenizer,
        [by_number[e.example.row] for e in encoded],
        policy,
        [e.example.row for e in encoded],
        [e.example.input_ids for e in encoded],
    )
    for n in sorted(found):
        err = RenderError(n, found[n][0].split(": ", 1)[1])
        if errors is None:
            raise err
        errors.append(err)
    return [e for e in encoded if e.example.row not in found]


def tokenize_row(
    tokenizer: Any, row: dict[str, Any], policy: LossPolicy, row_number: int
) -> Example:
    """Tokenize and mask one normalised row (``data.rows.parse_row``).

    Returns:
        ``Example(input_ids, weights, row=row_number)``; ``input_ids`` equal
        ``apply_chat_template(messages, tools=tools, tokenize=True)["input_ids"]``.

    Raises:
        RenderError: the template drops a field the row uses or spans cannot be recovered.
        InvalidRequest: the tokenizer is not fast or has no chat template.
    """
    enc = encode_rows(tokenizer, [row], policy, [row_number])[0]
    for w in enc.rendered.warnings:
        log.warning(w)
    return enc.example


def length_stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


@dataclass
class Prepared:
    """Examples ready to pack, and what happened to the rows.

    Attributes:
        examples: the kept examples, each within ``max_seq_length`` with ≥1 supervised token.
        report: ``{"rows", "examples", "dropped_too_long": [row numbers],
            "no_supervised": [row numbers], "supervised_tokens": {"min","median","max","total"},
            "total_tokens": {...}, "max_seq_length", "warnings": [str]}`` (token stats over
            the kept examples).
    """

    examples: list[Example]
    report: dict[str, Any] = field(default_factory=dict)


def examples_report(
    rows: int,
    kept: list[Example],
    max_seq_length: int,
    too_long: list[int] | None = None,
    empty: list[int] | None = None,
) -> dict[str, Any]:
    """The report of :class:`Prepared` for ``kept`` examples out of ``rows`` rows.

    Prepared token rows (:mod:`akka_optimize.data.prepared.rows`) get the same report, with no
    row dropped: they are trained as given.
    """
    return {
        "rows": rows,
        "examples": len(kept),
        "max_seq_length": max_seq_length,
        "dropped_too_long": list(too_long or []),
        "no_supervised": list(empty or []),
        "supervised_tokens": length_stats([e.supervised_tokens for e in kept])
        | {"total": sum(e.supervised_tokens for e in kept)},
        "total_tokens": length_stats([len(e.input_ids) for e in kept])
        | {"total": sum(len(e.input_ids) for e in kept)},
        "warnings": [],
    }


def prepare_examples(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    policy: LossPolicy,
    max_seq_length: int,
    on_too_long: Literal["drop", "refuse"] = "drop",
    row_numbers: list[int] | None = None,
    progress: Callable[[int], None] | None = None,
    images: ImageInputs | None = None,
) -> Prepared:
    """Tokenize and mask a dataset, dropping (or refusing) rows that do not fit.

    A row longer than ``max_seq_length`` tokens is never truncated: it is dropped and its
    row number listed (``on_too_long="drop"``), or the dataset is refused
    (``"refuse"``) (behaviours.md 5). A row with no supervised token is listed and left
    out (behaviours.md 4). Nothing is silent: the report carries both lists.

    Args:
        rows: normalised rows; ``row_numbers`` (default 1..N) are their line numbers.
        progress: rows tokenized so far, after each batch (see :func:`encode_rows`).
        images: image rows' processor, as :func:`encode_rows`.

    Raises:
        InvalidRequest: a row too long under ``"refuse"``, or no supervised token left in
            the whole dataset (checked before any device is claimed).
        RenderError: a row the template cannot render correctly.
    """
    if on_too_long not in ("drop", "refuse"):
        raise ValueError(f"on_too_long must be 'drop' or 'refuse', not {on_too_long!r}")
    numbers = row_numbers or list(range(1, len(rows) + 1))
    encoded = encode_rows(tokenizer, rows, policy, numbers, progress=progress, images=images)
    kept, too_long, empty, warnings = [], [], [], []
    for enc in encoded:
        warnings += enc.rendered.warnings
        if trains(enc.example, max_seq_length, too_long, empty):
            kept.append(enc.example)
    report = examples_report(len(rows), kept, max_seq_length, [r for r, _ in too_long], empty)
    report["warnings"] = warnings
    refuse_untrainable(len(rows), too_long, empty, len(kept), max_seq_length, on_too_long, report)
    return Prepared(kept, report)


def trains(
    ex: Example, max_seq_length: int, too_long: list[tuple[int, int]], empty: list[int]
) -> bool:
    """Whether ``ex`` trains: it fits ``max_seq_length`` and supervises a token; otherwise
    its row is listed in ``too_long`` (with its tokens) or ``empty``."""
    if len(ex.input_ids) > max_seq_length:
        too_long.append((ex.row, len(ex.input_ids)))
        return False
    if ex.supervised_tokens == 0:
        empty.append(ex.row)
        return False
    return True


def refuse_untrainable(
    rows: int,
    too_long: list[tuple[int, int]],
    empty: list[int],
    kept: int,
    max_seq_length: int,
    on_too_long: str,
    report: dict[str, Any] | None = None,
) -> None:
    """The refusals of :func:`prepare_examples` once every row is counted: a row too long
    under ``"refuse"`` (``too_long``: row number and tokens), or no row left to train."""
    if too_long and on_too_long == "refuse":
        listed = ", ".join(f"row {r} ({n} tokens)" for r, n in too_long[:10])
        raise InvalidRequest(
            f"{len(too_long)} rows are longer than maxSeqLength {max_seq_length}: {listed}; "
            "raise maxSeqLength or shorten them",
            field="config.maxSeqLength",
            details={"rows": [r for r, _ in too_long]},
        )
    if not kept:
        why = []
        if too_long:
            why.append(f"{len(too_long)} longer than maxSeqLength {max_seq_length}")
        if empty:
            why.append(f"{len(empty)} with no supervised token under the loss policy")
        raise InvalidRequest(
            f"no supervised token remains in the dataset ({rows} rows: {', '.join(why)}); "
            "training would learn nothing. Check config.loss and config.maxSeqLength",
            field="config.dataset",
            details=report,
        )


CHECK_CHUNK_ROWS = 1024
"""Rows :func:`check_trainable` tokenizes at a time (their tokens are dropped once counted)."""


def check_trainable(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    max_seq_length: int,
    on_too_long: Literal["drop", "refuse"] = "drop",
    numbers: Sequence[int] | None = None,
    images: ImageInputs | None = None,
) -> int:
    """Raise what :func:`prepare_examples` would raise for ``rows``, keeping only counts:
    admission's check that the worker will find something to train (issue 47).

    Rows are tokenized ``CHECK_CHUNK_ROWS`` at a time and their tokens dropped once
    counted, so memory grows with two numbers per row, not with the dataset's tokens.

    Args:
        rows: normalised rows, a list or a sequence that slices to lists.
        numbers: the rows' row numbers (1..N by default; a sample's are the dataset's).
        images: image rows' processor, as :func:`encode_rows`.

    Returns:
        The number of rows that would train (fit ``max_seq_length``, supervise a token).

    Raises:
        RenderError: the first row the chat template cannot render (the worker's refusal).
        InvalidRequest: a row too long under ``"refuse"``, or no supervised token left.
    """
    too_long: list[tuple[int, int]] = []
    empty: list[int] = []
    kept = 0
    for b in range(0, len(rows), CHECK_CHUNK_ROWS):
        chunk = list(rows[b : b + CHECK_CHUNK_ROWS])
        names = (
            list(numbers[b : b + len(chunk)])
            if numbers is not None
            else list(range(b + 1, b + len(chunk) + 1))
        )
        for enc in encode_rows(tokenizer, chunk, policy, names, images=images):
            kept += trains(enc.example, max_seq_length, too_long, empty)
    refuse_untrainable(len(rows), too_long, empty, kept, max_seq_length, on_too_long)
    return kept


def naming_dataset(exc: InvalidRequest, field: str, ref: str) -> InvalidRequest:
    """``exc`` (a refusal of a dataset's rows) as a refusal of the dataset at ``field``
    (``config.dataset`` or ``config.data.validationDataset``) named ``ref``: the sentence
    starts with both, so a validation dataset's refusal never reads as the training one's.
    A refusal of ``config.maxSeqLength`` keeps that field (the setting to change); a
    refusal with the generic code gets ``dataset_not_trainable``."""
    keep = exc.field if exc.field == "config.maxSeqLength" else field
    code = "dataset_not_trainable" if exc.code == InvalidRequest.code else exc.code
    return InvalidRequest(f"{field} {ref}: {exc.message}", field=keep, code=code)
