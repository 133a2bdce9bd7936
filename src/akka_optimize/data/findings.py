"""Dataset findings for a dataset version against a base model (F033, issue 5 item 5).

What a dry run shows before training: how many rows, how many tokens train, which rows do
not fit ``maxSeqLength``, which train nothing, which the base model's chat template cannot
render, and which rows are exact or near duplicates of each other.

Near duplicates: each row's text (every message's role and text, lower-cased, punctuation
removed, whitespace collapsed) is shingled into word 3-grams (character 5-grams for rows of
fewer than 3 words) and hashed with MinHash (``datasketch``, 128 permutations); candidate
pairs come from MinHash LSH at Jaccard ``NEAR_DUPLICATE_THRESHOLD`` and are confirmed by
their estimated Jaccard similarity. Rows that are exact duplicates of each other are listed
only under ``exact_duplicates``.

Large datasets (issue 48 item 8): token findings cost about 0.3 ms of CPU per short row and
1.4 µs per byte of long rows, MinHash about 0.1 ms per row, so at the upload limit (256 MiB,
about 5 million short rows) a pass over every row took many minutes. Above
``FINDINGS_SAMPLE_ROWS`` rows or ``FINDINGS_SAMPLE_BYTES`` bytes, token findings and near
duplicates cover a seeded random sample within both bounds (:func:`sample`), and the
findings say so in ``sampled``; exact duplicates still cover every row, with one 8-byte hash
per row (a sort finds equal hashes, and equal hashes are confirmed on the rows' bytes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from akka_optimize import cancel
from akka_optimize.data.masks import encode_rows, length_stats
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import RenderError

NEAR_DUPLICATE_THRESHOLD = 0.8
NUM_PERM = 128
MAX_LISTED = 50
FINDINGS_CHUNK_ROWS = 1024
"""Rows tokenized at a time by :func:`findings` (their tokens are dropped once counted)."""
FINDINGS_SAMPLE_ROWS = 10_000
"""Most rows token findings and near duplicates examine (issue 48 item 8); above it they
examine a seeded sample (:func:`sample`)."""
FINDINGS_SAMPLE_BYTES = 4 * 2**20
"""Most bytes of canonical JSONL rows token findings and near duplicates examine."""
SAMPLE_SEED = 48
"""The sample's seed: the same dataset gives the same sample, so the same findings."""
_HASH_CHUNK_ROWS = 1 << 18
_PUNCT = re.compile(r"[^\w\s]+")
_SPACE = re.compile(r"\s+")


def row_text(row: dict[str, Any]) -> str:
    """A row's normalised text for duplicate detection (roles, texts, tool calls)."""
    pieces = []
    messages = row.get("messages") or [  # a preference pair: its prompt and both answers
        *row.get("prompt", []),
        *row.get("chosen", []),
        *row.get("rejected", []),
    ]
    for m in messages:
        content = m["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        pieces.append(f"{m['role']}: {text}")
        for call in m.get("tool_calls", []):
            fn = call["function"]
            pieces.append(f"call {fn['name']} {json.dumps(fn['arguments'], sort_keys=True)}")
    text = _PUNCT.sub(" ", "\n".join(pieces).lower())
    return _SPACE.sub(" ", text).strip()


def _shingles(text: str) -> set[bytes]:
    words = text.split()
    if len(words) >= 3:
        return {" ".join(words[i : i + 3]).encode() for i in range(len(words) - 2)}
    return {text[i : i + 5].encode() for i in range(max(1, len(text) - 4))}


def _groups(pairs: list[tuple[int, int]], n: int) -> list[list[int]]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def _line(row: dict[str, Any]) -> bytes:
    """A row's canonical JSON line as the registry stores it (``registry.blobs``), without
    its newline."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _lines(rows: Sequence[dict[str, Any]]) -> Iterator[bytes]:
    """Every row's canonical line: read in place from a ``JsonlRows``, else serialised."""
    lines = getattr(rows, "lines", None)
    return lines() if lines is not None else (_line(r) for r in rows)


def _line_at(rows: Sequence[dict[str, Any]], i: int) -> bytes:
    line = getattr(rows, "line", None)
    return line(i) if line is not None else _line(rows[i])


@dataclass
class Sample:
    """The rows token findings and near duplicates examine (:func:`sample`).

    ``indices``: 0-based positions in the dataset, ascending; ``of``: the dataset's rows;
    ``nbytes``: the dataset's bytes of canonical JSONL (None when not measured)."""

    indices: list[int]
    of: int
    nbytes: int | None

    def field(self, covers: str) -> dict[str, Any]:
        """The findings' ``sampled`` field: ``{"rows", "of", "why"}``; ``covers`` names
        the findings the sample is for."""
        size = f" ({self.nbytes / 2**20:.1f} MiB)" if self.nbytes is not None else ""
        return {
            "rows": len(self.indices),
            "of": self.of,
            "why": f"the dataset's {self.of} rows{size} are more than the findings examine "
            f"({FINDINGS_SAMPLE_ROWS} rows, {FINDINGS_SAMPLE_BYTES / 2**20:g} MiB): {covers} "
            f"cover {len(self.indices)} of {self.of} rows drawn at random (seed "
            f"{SAMPLE_SEED}); exact duplicates cover every row, and a row outside the "
            "sample that cannot train fails the run when it prepares, naming the row",
        }


def sample(rows: Sequence[dict[str, Any]]) -> Sample | None:
    """The rows that token findings and near duplicates examine, or None for every row.

    Every row is examined when there are at most ``FINDINGS_SAMPLE_ROWS`` rows of at most
    ``FINDINGS_SAMPLE_BYTES`` bytes in all (canonical JSONL). Otherwise rows are drawn in
    a random order seeded with ``SAMPLE_SEED`` and taken while both bounds hold (the first
    drawn is always taken), so the sample is uniform, the same for the same dataset, and
    its cost is bounded whatever the dataset's size.
    """
    n = len(rows)
    nbytes = getattr(rows, "nbytes", None)
    if n <= FINDINGS_SAMPLE_ROWS:
        if nbytes is None:
            nbytes = sum(len(line) + 1 for line in _lines(rows))
        if nbytes <= FINDINGS_SAMPLE_BYTES:
            return None
    order = np.random.default_rng(SAMPLE_SEED).choice(
        n, size=min(n, FINDINGS_SAMPLE_ROWS), replace=False, shuffle=True
    )
    taken: list[int] = []
    total = 0
    for i in order.tolist():
        total += len(_line_at(rows, i)) + 1
        if taken and total > FINDINGS_SAMPLE_BYTES:
            break
        taken.append(i)
    return Sample(sorted(taken), n, nbytes)


class Picked(Sequence[dict[str, Any]]):
    """The sampled rows of ``rows`` as a sequence (read from ``rows`` when accessed)."""

    def __init__(self, rows: Sequence[dict[str, Any]], indices: list[int]) -> None:
        self._rows, self._indices = rows, indices

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._rows[i] for i in self._indices[index]]
        return self._rows[self._indices[index]]


def _exact_groups(rows: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """Groups (ascending 0-based indices) of rows with equal canonical lines, by first row.

    One 8-byte hash per row (Python's ``hash`` of the line: about 0.2 µs a row), sorted;
    rows whose hashes are equal are grouped by their bytes, so a hash collision never
    joins distinct rows. Memory: about 24 bytes per row beyond the rows.
    """
    n = len(rows)
    hashes = np.empty(n, dtype=np.int64)
    lines = _lines(rows)
    for b in range(0, n, _HASH_CHUNK_ROWS):
        cancel.check()
        m = min(_HASH_CHUNK_ROWS, n - b)
        hashes[b : b + m] = np.fromiter(map(hash, lines), dtype=np.int64, count=m)
    order = np.argsort(hashes, kind="stable")
    ranked = hashes[order]
    del hashes
    same = np.flatnonzero(ranked[1:] == ranked[:-1])
    if not len(same):
        return []
    # runs of equal hashes: [starts[k], ends[k]) in ``order``
    breaks = np.flatnonzero(np.diff(same) != 1) + 1
    starts = same[np.concatenate(([0], breaks))]
    ends = same[np.concatenate((breaks - 1, [len(same) - 1]))] + 2
    groups: list[np.ndarray] = []
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        if k % 4096 == 0:
            cancel.check()
        run = order[s:e]
        first = _line_at(rows, int(run[0]))
        if all(_line_at(rows, int(i)) == first for i in run[1:]):
            groups.append(run)
            continue
        by_line: dict[bytes, list[int]] = {}
        for i in run.tolist():
            by_line.setdefault(_line_at(rows, i), []).append(i)
        groups += [np.array(g) for g in by_line.values() if len(g) > 1]
    groups.sort(key=lambda g: int(g[0]))
    return groups


def duplicates(
    rows: Sequence[dict[str, Any]],
    row_numbers: Sequence[int],
    picked: Sample | None | bool = True,
    listed: int | None = None,
) -> dict[str, Any]:
    """Exact and near-duplicate groups of row numbers (each group sorted, groups by first row).

    Args:
        rows: the rows (a list, or :class:`akka_optimize.registry.row_view.JsonlRows`).
        row_numbers: each row's number, ascending (1..N for a whole dataset).
        picked: the rows near duplicates examine: ``True`` (the default) draws them with
            :func:`sample`; a :class:`Sample` or None (every row) gives them.
        listed: at most this many groups of each kind are listed (the first ones), and
            ``exact_duplicates_count`` and ``near_duplicates_count`` count them all;
            None lists every group.

    Returns:
        ``{"exact_duplicates": [[rows]], "near_duplicates": [[rows]]}``, and ``sampled``
        (:meth:`Sample.field`) when near duplicates cover a sample. Exact duplicates
        cover every row; near duplicates are among distinct examined rows (the first
        examined row of each exact group).
    """
    from datasketch import MinHash, MinHashLSH

    if picked is True:
        picked = sample(rows)
    exact = _exact_groups(rows)
    cancel.check()
    examined = rows if picked is None else Picked(rows, picked.indices)
    positions = range(len(rows)) if picked is None else picked.indices
    seen: set[bytes] = set()
    reps = []  # positions in ``examined`` of its first row of each distinct line
    for k in range(len(examined)):
        line = _line_at(rows, positions[k])
        if line not in seen:
            seen.add(line)
            reps.append(k)
    del seen
    lsh = MinHashLSH(threshold=NEAR_DUPLICATE_THRESHOLD, num_perm=NUM_PERM)
    hashes: dict[int, Any] = {}
    first = MinHash(num_perm=NUM_PERM)  # its permutations cost more than hashing a row
    for n, k in enumerate(reps):
        if n % 512 == 0:
            cancel.check()
        mh = MinHash(num_perm=NUM_PERM, permutations=first.permutations, scheme=first.scheme)
        mh.update_batch(list(_shingles(row_text(examined[k]))))
        hashes[k] = mh
        lsh.insert(k, mh)
    near_pairs = []
    for k in reps:
        for j in lsh.query(hashes[k]):
            if j > k and hashes[k].jaccard(hashes[j]) >= NEAR_DUPLICATE_THRESHOLD:
                near_pairs.append((k, j))
    near = [[positions[k] for k in g] for g in _groups(near_pairs, len(examined))]

    def numbered(groups: Sequence[Sequence[int]]) -> list[list[int]]:
        return sorted(sorted(row_numbers[int(i)] for i in g) for g in groups)

    near.sort(key=lambda g: g[0])
    out: dict[str, Any] = {
        "exact_duplicates": numbered(exact[:listed]),
        "near_duplicates": numbered(near[:listed]),
    }
    if listed is not None:
        out |= {"exact_duplicates_count": len(exact), "near_duplicates_count": len(near)}
    if picked is not None:
        out["sampled"] = picked.field("near duplicates")
    return out


def findings(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    max_seq_length: int,
    row_numbers: Sequence[int] | None = None,
    images: Any = None,
) -> dict[str, Any]:
    """Findings for normalised ``rows`` against a base model's tokenizer and a loss policy.

    ``images`` (:class:`akka_optimize.data.vision.ImageInputs`) trains image rows on a
    multimodal model and refuses them, naming the model, on a text-only one.

    Args:
        tokenizer: the base model's fast tokenizer (its chat template renders the rows).
        rows: normalised rows (``data.rows``), a list or any sequence that slices to
            lists (:class:`akka_optimize.registry.row_view.JsonlRows`); ``row_numbers``
            default to 1..N.
        policy: the run's loss policy.
        max_seq_length: ``config.maxSeqLength`` in tokens.

    Returns:
        ``{"rows": int, "trainable_rows": int, "supervised_tokens": {"min", "median", "max",
        "total"}, "total_tokens": {...}, "truncated_rows": [row numbers longer than
        max_seq_length], "no_supervised_rows": [row numbers], "refused_rows": [{"row",
        "message"}] (rows training refuses: the template cannot render them, or a trained
        turn is not trained on the tokens an endpoint generates it from,
        :func:`data.render.prompt_mismatches`), "exact_duplicates": [[row numbers]], "near_duplicates": [[row
        numbers]], "warnings": [str]}``. Token statistics cover rendered rows that fit.
        Long lists are cut to ``MAX_LISTED`` entries; counts are in ``*_count`` keys.
        Above ``FINDINGS_SAMPLE_ROWS`` rows or ``FINDINGS_SAMPLE_BYTES`` bytes (:func:`sample`)
        ``sampled`` (``{"rows", "of", "why"}``) says that the token findings (counts and
        statistics included: ``trainable_rows`` counts the sample's) and near duplicates
        cover a sample; the row numbers listed are the dataset's.

    Memory: rows are tokenized ``FINDINGS_CHUNK_ROWS`` at a time and only three numbers
    per row are kept, so beyond the rows themselves the findings hold about 1 KB per examined
    row (its MinHash for near duplicates), not its tokens and offsets (about 40 KB per GSM8K
    row, measured with tracemalloc), and 24 bytes per row for exact duplicates.
    """
    numbers: Sequence[int] = row_numbers or range(1, len(rows) + 1)
    picked = sample(rows)
    if picked is None:
        examined, examined_numbers = rows, numbers
    else:
        examined = Picked(rows, picked.indices)
        examined_numbers = [numbers[i] for i in picked.indices]
    errors: list[RenderError] = []
    counts, warnings = _count_rows(tokenizer, examined, policy, examined_numbers, errors, images)
    fits = [c for c in counts if c[1] <= max_seq_length]
    truncated = [n for n, total, _ in counts if total > max_seq_length]
    empty = [n for n, _, sup in fits if sup == 0]
    kept = [c for c in fits if c[2]]
    dup = duplicates(rows, numbers, picked, listed=MAX_LISTED)
    cancel.check()
    out: dict[str, Any] = {
        "rows": len(rows),
        "trainable_rows": len(kept),
        "max_seq_length": max_seq_length,
        "supervised_tokens": length_stats([sup for _, _, sup in kept])
        | {"total": sum(sup for _, _, sup in kept)},
        "total_tokens": length_stats([total for _, total, _ in kept])
        | {"total": sum(total for _, total, _ in kept)},
    }
    lists = {
        "truncated_rows": truncated,
        "no_supervised_rows": empty,
        "refused_rows": [{"row": e.row, "message": e.message} for e in errors],
        "exact_duplicates": dup["exact_duplicates"],
        "near_duplicates": dup["near_duplicates"],
        "warnings": warnings,
    }
    for key, values in lists.items():
        out[key] = values[:MAX_LISTED]
        out[f"{key}_count"] = dup.get(f"{key}_count", len(values))
    if picked is not None:
        out["sampled"] = picked.field("token findings and near duplicates")
    return out


def _count_rows(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    numbers: Sequence[int],
    errors: list[RenderError],
    images: Any = None,
) -> tuple[list[tuple[int, int, int]], list[str]]:
    """Tokenize ``rows`` ``FINDINGS_CHUNK_ROWS`` at a time and keep what :func:`findings`
    reports of each: ``(counts, warnings)``, with ``(row number, total tokens, supervised
    tokens)`` per rendered row and the rendering warnings; the rows training refuses
    (:func:`akka_optimize.data.masks.encode_rows`) are appended to ``errors``."""
    # (row number, total tokens, supervised tokens) per rendered row: a chunk's token ids
    # and offsets are dropped once counted, so memory grows with these few numbers per
    # row, not with the dataset's tokens (issue 14 item 3)
    counts: list[tuple[int, int, int]] = []
    warnings: list[str] = []
    for b in range(0, len(rows), FINDINGS_CHUNK_ROWS):
        chunk, chunk_numbers = (
            rows[b : b + FINDINGS_CHUNK_ROWS],
            list(numbers[b : b + FINDINGS_CHUNK_ROWS]),
        )
        encoded = encode_rows(tokenizer, chunk, policy, chunk_numbers, errors, images=images)
        warnings += [w for e in encoded for w in e.rendered.warnings]
        counts += [
            (e.example.row, len(e.example.input_ids), e.example.supervised_tokens) for e in encoded
        ]
        del encoded
    return counts, warnings
