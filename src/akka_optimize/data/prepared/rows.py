"""Prepared token rows: Parquet files of ``input_ids`` and ``loss_mask`` beside ``prepared.json``.

seeds/001 "Train prepared token rows as given" (F029, F030): a supervised dataset can hold
rows that are already token ids, each with a loss mask; a run trains them as given, without
rendering a chat template or applying a loss policy. The descriptor names the tokenizer and
chat template the rows were prepared with; a run is refused before it claims devices when
the base model's tokenizer (or template) differs or ``maxSeqLength`` is shorter than the
longest row.

Layout of a prepared dataset folder::

    prepared.json
    rows-00000.parquet     # columns input_ids: list<int32>, loss_mask: list<int8>
    rows-00001.parquet     # (one file per ROWS_PER_FILE rows)

``prepared.json``::

    {"format": "akka-optimize/prepared-token-rows", "version": 1,
     "tokenizer": {"name": str, "sha256": str, "vocabSize": int},
     "chatTemplate": {"sha256": str, "text": str},
     "files": ["rows-00000.parquet", ...],
     "rows": int, "longestRow": int, "supervisedTokens": int}

``loss_mask[t]`` is 1 when token ``t`` is a target (aligned to ``input_ids`` exactly like
``Example.weights``), so ``loss_mask[0]`` must be 0 and the run's supervised token count is
the sum of the masks. Write one with :func:`write_prepared`, or from a JSONL file with
``python -m akka_optimize.data.prepared.rows``.

``registry datasets register NS/NAME -f DIR`` sends the folder as a ZIP; the registry
checks every row without a tokenizer (:func:`iter_rows`: ids below ``vocabSize``) and
the descriptor's counts (:func:`check_counts`), and stores the canonical form: a header
line (:func:`header_of`) and one ``{"input_ids", "loss_mask"}`` line per row, so the
same tokens are the same version. A supervised run reads it back with
:func:`examples_from_canonical`.

This module writes, reads and checks the rows (and is the writer script); the descriptor
and its guards are :mod:`akka_optimize.data.prepared.descriptor`, the canonical form
:mod:`akka_optimize.data.prepared.canonical`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from akka_optimize.data.jsonl import iter_jsonl_rows
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.prepared.canonical import check_counts as check_counts
from akka_optimize.data.prepared.canonical import examples_from_canonical as examples_from_canonical
from akka_optimize.data.prepared.canonical import header_of as header_of
from akka_optimize.data.prepared.descriptor import DESCRIPTOR as DESCRIPTOR
from akka_optimize.data.prepared.descriptor import (
    FORMAT,
    read_descriptor,
    template_fingerprint,
    tokenizer_fingerprint,
)
from akka_optimize.data.prepared.descriptor import check_length as check_length
from akka_optimize.data.prepared.descriptor import check_prepared as check_prepared
from akka_optimize.data.prepared.descriptor import check_tokenizer as check_tokenizer
from akka_optimize.data.prepared.descriptor import parse_descriptor as parse_descriptor
from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest

ROWS_PER_FILE = 50_000


def write_prepared(
    directory: str | Path, examples: list[Example], tokenizer: Any
) -> dict[str, Any]:
    """Write ``examples`` as prepared token rows into ``directory`` (created if missing).

    Returns:
        The descriptor written to ``prepared.json``.

    Raises:
        ValueError: ``examples`` is empty.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not examples:
        raise ValueError("no examples to write")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for k in range(0, len(examples), ROWS_PER_FILE):
        chunk = examples[k : k + ROWS_PER_FILE]
        table = pa.table(
            {
                "input_ids": pa.array([e.input_ids for e in chunk], type=pa.list_(pa.int32())),
                "loss_mask": pa.array(
                    [[0] + [1 if w else 0 for w in e.weights[1:]] for e in chunk],
                    type=pa.list_(pa.int8()),
                ),
            }
        )
        name = f"rows-{k // ROWS_PER_FILE:05d}.parquet"
        pq.write_table(table, out / name)
        files.append(name)
    descriptor = {
        "format": FORMAT,
        "version": 1,
        "tokenizer": {
            "name": str(getattr(tokenizer, "name_or_path", "") or ""),
            "sha256": tokenizer_fingerprint(tokenizer),
            "vocabSize": len(tokenizer),
        },
        "chatTemplate": {
            "sha256": template_fingerprint(tokenizer),
            "text": str(tokenizer.chat_template or ""),
        },
        "files": files,
        "rows": len(examples),
        "longestRow": max(len(e.input_ids) for e in examples),
        "supervisedTokens": sum(sum(1 for w in e.weights[1:] if w) for e in examples),
    }
    (out / DESCRIPTOR).write_text(json.dumps(descriptor, indent=2) + "\n")
    return descriptor


def check_row(
    where: str, field: str, ids: Any, mask: Any, vocab: int, max_seq_length: int | None
) -> None:
    """The checks one prepared row passes (registration and loading share them).

    Raises:
        InvalidRequest: lengths that differ or are zero, a mask value other than 0/1,
            ``loss_mask[0]`` = 1, a mask of zeros only, a token id outside ``[0, vocab)``, or (when
            ``max_seq_length`` is given) a row longer than it; each names ``where``.
    """
    if not ids or mask is None or len(ids) != len(mask):
        raise InvalidRequest(
            f"{where}: input_ids and loss_mask must be non-empty and the same length",
            field=field,
        )
    if max_seq_length is not None and len(ids) > max_seq_length:
        raise InvalidRequest(
            f"{where} has {len(ids)} tokens, more than maxSeqLength {max_seq_length}",
            field="config.maxSeqLength",
        )
    if any(m not in (0, 1) for m in mask) or mask[0]:
        raise InvalidRequest(
            f"{where}: loss_mask values must be 0 or 1, and loss_mask[0] 0 (nothing predicts the first token)",
            field=field,
        )
    if not any(mask):
        raise InvalidRequest(
            f"{where}: every loss_mask value is 0, so the row trains nothing; leave it out",
            field=field,
        )
    if any(i is None for i in ids) or min(ids) < 0 or max(ids) >= vocab:
        raise InvalidRequest(
            f"{where}: a token id is outside the vocabulary (size {vocab})", field=field
        )


def iter_rows(
    desc: dict[str, Any], read_file: Any, vocab: int, max_seq_length: int | None = None
) -> Any:
    """Yield ``(input_ids, loss_mask)`` of every row, in file order, each checked.

    Args:
        desc: a checked descriptor (:func:`parse_descriptor`).
        read_file: ``name -> bytes | None`` (None: the file is missing).
        vocab: ids must lie in ``[0, vocab)``.
        max_seq_length: refuse rows longer than this (None: no bound).

    Raises:
        InvalidRequest: a missing or unreadable file or column, or a bad row
            (:func:`check_row`), naming the file and row (numbered 1.. across files).
    """
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    row = 0
    for name in desc["files"]:
        data = read_file(name)
        if data is None:
            raise InvalidRequest(
                f"{DESCRIPTOR} names {name}, which is missing", field=f"{DESCRIPTOR}:files"
            )
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError) as exc:
            raise InvalidRequest(
                f"{name} is not a readable Parquet file: {exc}", field=name
            ) from None
        for col in ("input_ids", "loss_mask"):
            if col not in table.column_names:
                raise InvalidRequest(f"{name} has no {col} column", field=name)
        for ids, mask in zip(
            table["input_ids"].to_pylist(), table["loss_mask"].to_pylist(), strict=True
        ):
            row += 1
            check_row(f"{name}: row {row}", name, ids, mask, vocab, max_seq_length)
            yield list(ids), list(mask)


def load_prepared(directory: str | Path, tokenizer: Any, max_seq_length: int) -> list[Example]:
    """Load prepared token rows as examples, trained as given.

    Args:
        directory: folder holding ``prepared.json`` and its Parquet files.
        tokenizer: the base model's tokenizer.
        max_seq_length: ``config.maxSeqLength``.

    Returns:
        One :class:`Example` per row, ``row`` numbered 1.. across the files in order,
        ``weights`` = ``loss_mask`` as floats.

    Raises:
        InvalidRequest: descriptor guards (:func:`check_prepared`), a missing file or
            column, or a bad row (:func:`check_row`), each naming the file and row.
    """
    desc = read_descriptor(directory)
    check_prepared(desc, tokenizer, max_seq_length)

    def read(name: str) -> bytes | None:
        path = Path(directory) / name
        return path.read_bytes() if path.is_file() else None

    pairs = iter_rows(desc, read, len(tokenizer), max_seq_length)
    return [
        Example(ids, [float(m) for m in mask], n) for n, (ids, mask) in enumerate(pairs, start=1)
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m akka_optimize.data.prepared.rows ROWS.jsonl --tokenizer DIR --out DIR``.

    Tokenizes a JSONL file of conversation rows with the tokenizer's chat template and a
    loss policy, and writes prepared token rows with their descriptor.
    """
    from transformers import AutoTokenizer

    from akka_optimize.data.masks import prepare_examples  # lazy: numpy

    ap = argparse.ArgumentParser(
        prog="python -m akka_optimize.data.prepared.rows", description=main.__doc__
    )
    ap.add_argument("rows", type=Path)
    ap.add_argument("--tokenizer", required=True, help="folder of the base model's tokenizer")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--max-seq-length", type=int, default=4096)
    ap.add_argument(
        "--loss", default="{}", help='config.loss as JSON, e.g. {"assistantTurns": "last"}'
    )
    args = ap.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    pairs = iter_jsonl_rows(args.rows.read_bytes(), args.rows.name)
    prep = prepare_examples(
        tok,
        [r for _, r in pairs],
        LossPolicy.from_config(json.loads(args.loss)),
        args.max_seq_length,
        row_numbers=[n for n, _ in pairs],
    )
    desc = write_prepared(args.out, prep.examples, tok)
    print(
        json.dumps(
            {k: v for k, v in desc.items() if k != "chatTemplate"} | {"report": prep.report},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
