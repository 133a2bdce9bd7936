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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from akka_optimize import cancel
from akka_optimize.data.masks import _stats, encode_rows
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import RenderError

NEAR_DUPLICATE_THRESHOLD = 0.8
NUM_PERM = 128
MAX_LISTED = 50
FINDINGS_CHUNK_ROWS = 1024
"""Rows tokenized at a time by :func:`findings` (their tokens are dropped once counted)."""
_PUNCT = re.compile(r"[^\w\s]+")
_SPACE = re.compile(r"\s+")


def row_text(row: dict[str, Any]) -> str:
    """A row's normalised text for duplicate detection (roles, texts, tool calls)."""
    pieces = []
    for m in row["messages"]:
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


def duplicates(
    rows: Sequence[dict[str, Any]], row_numbers: list[int]
) -> dict[str, list[list[int]]]:
    """Exact and near-duplicate groups of row numbers (each group sorted, groups by first row).

    Returns:
        ``{"exact_duplicates": [[rows]], "near_duplicates": [[rows]]}``.
    """
    from datasketch import MinHash, MinHashLSH

    keys = [hashlib.sha256(json.dumps(r, sort_keys=True).encode()).digest() for r in rows]
    first: dict[bytes, int] = {}
    exact_pairs = []
    for i, k in enumerate(keys):
        if k in first:
            exact_pairs.append((first[k], i))
        else:
            first[k] = i
    exact = _groups(exact_pairs, len(rows))
    # near duplicates among distinct rows only (one representative per exact group)
    reps = sorted(first.values())
    lsh = MinHashLSH(threshold=NEAR_DUPLICATE_THRESHOLD, num_perm=NUM_PERM)
    hashes: dict[int, Any] = {}
    for k, i in enumerate(reps):
        if k % 512 == 0:
            cancel.check()
        mh = MinHash(num_perm=NUM_PERM)
        mh.update_batch(list(_shingles(row_text(rows[i]))))
        hashes[i] = mh
        lsh.insert(i, mh)
    near_pairs = []
    for i in reps:
        for j in lsh.query(hashes[i]):
            if j > i and hashes[i].jaccard(hashes[j]) >= NEAR_DUPLICATE_THRESHOLD:
                near_pairs.append((i, j))
    near = _groups(near_pairs, len(rows))

    def numbered(groups: list[list[int]]) -> list[list[int]]:
        return sorted(sorted(row_numbers[i] for i in g) for g in groups)

    return {"exact_duplicates": numbered(exact), "near_duplicates": numbered(near)}


def findings(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    max_seq_length: int,
    row_numbers: list[int] | None = None,
) -> dict[str, Any]:
    """Findings for normalised ``rows`` against a base model's tokenizer and a loss policy.

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

    Memory: rows are tokenized ``FINDINGS_CHUNK_ROWS`` at a time and only three numbers
    per row are kept, so beyond the rows themselves the findings hold about 1 KB per row
    (its MinHash for near duplicates), not its tokens and offsets (about 40 KB per GSM8K
    row, measured with tracemalloc).
    """
    numbers = row_numbers or list(range(1, len(rows) + 1))
    errors: list[RenderError] = []
    counts, warnings = _count_rows(tokenizer, rows, policy, numbers, errors)
    fits = [c for c in counts if c[1] <= max_seq_length]
    truncated = [n for n, total, _ in counts if total > max_seq_length]
    empty = [n for n, _, sup in fits if sup == 0]
    kept = [c for c in fits if c[2]]
    dup = duplicates(rows, numbers)
    cancel.check()
    out: dict[str, Any] = {
        "rows": len(rows),
        "trainable_rows": len(kept),
        "max_seq_length": max_seq_length,
        "supervised_tokens": _stats([sup for _, _, sup in kept])
        | {"total": sum(sup for _, _, sup in kept)},
        "total_tokens": _stats([total for _, total, _ in kept])
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
        out[f"{key}_count"] = len(values)
    return out


def _count_rows(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    numbers: list[int],
    errors: list[RenderError],
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
            numbers[b : b + FINDINGS_CHUNK_ROWS],
        )
        encoded = encode_rows(tokenizer, chunk, policy, chunk_numbers, errors=errors)
        warnings += [w for e in encoded for w in e.rendered.warnings]
        counts += [
            (e.example.row, len(e.example.input_ids), e.example.supervised_tokens) for e in encoded
        ]
        del encoded
    return counts, warnings
