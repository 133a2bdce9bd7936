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
``python -m akka_optimize.data.prepared``.

``registry datasets register NS/NAME -f DIR`` sends the folder as a ZIP; the registry
checks every row without a tokenizer (:func:`iter_rows`: ids below ``vocabSize``) and
the descriptor's counts (:func:`check_counts`), and stores the canonical form: a header
line (:func:`header_of`) and one ``{"input_ids", "loss_mask"}`` line per row, so the
same tokens are the same version. A supervised run reads it back with
:func:`examples_from_canonical`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest

DESCRIPTOR = "prepared.json"
FORMAT = "akka-optimize/prepared-token-rows"
ROWS_PER_FILE = 50_000


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's model, vocabulary, normalisation and added tokens.

    Runtime truncation/padding settings are left out, so a tokenizer that has been used
    keeps its fingerprint.
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec.pop("truncation", None)
    spec.pop("padding", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def template_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's chat template text (``""`` hashed when it has none)."""
    return hashlib.sha256(str(tokenizer.chat_template or "").encode()).hexdigest()


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


def parse_descriptor(data: bytes, source: str = DESCRIPTOR) -> dict[str, Any]:
    """Parse and check the bytes of ``prepared.json``.

    Raises:
        InvalidRequest: not JSON, another format, or a missing or mistyped field (named as
            ``prepared.json:FIELD``).
    """
    try:
        desc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{source} is not valid JSON: {exc}", field=DESCRIPTOR) from None
    if not isinstance(desc, dict) or desc.get("format") != FORMAT:
        raise InvalidRequest(f"{source}: format must be {FORMAT!r}", field=f"{DESCRIPTOR}:format")
    for key in ("tokenizer", "chatTemplate", "files", "longestRow"):
        if key not in desc:
            raise InvalidRequest(f"{source} has no {key}", field=f"{DESCRIPTOR}:{key}")
    tok = desc["tokenizer"]
    if not isinstance(tok, dict) or not isinstance(tok.get("sha256"), str):
        raise InvalidRequest(
            f"{source}: tokenizer must hold sha256 (the writer script records it)",
            field=f"{DESCRIPTOR}:tokenizer",
        )
    vocab = tok.get("vocabSize")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise InvalidRequest(
            f"{source}: tokenizer.vocabSize must be a positive integer, not {vocab!r}",
            field=f"{DESCRIPTOR}:tokenizer.vocabSize",
        )
    if not isinstance(desc["chatTemplate"], dict) or not isinstance(
        desc["chatTemplate"].get("sha256"), str
    ):
        raise InvalidRequest(
            f"{source}: chatTemplate must hold sha256", field=f"{DESCRIPTOR}:chatTemplate"
        )
    files = desc["files"]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise InvalidRequest(
            f"{source}: files must list the Parquet files of the rows",
            field=f"{DESCRIPTOR}:files",
        )
    return desc


def read_descriptor(directory: str | Path) -> dict[str, Any]:
    """Read and check ``prepared.json`` in ``directory`` (:func:`parse_descriptor`).

    Raises:
        InvalidRequest: missing, not JSON, or missing a field (named).
    """
    path = Path(directory) / DESCRIPTOR
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidRequest(
            f"prepared dataset has no {DESCRIPTOR}", field="config.dataset"
        ) from None
    return parse_descriptor(data)


def check_tokenizer(desc: dict[str, Any], tokenizer: Any) -> None:
    """F030: the rows were prepared with ``tokenizer`` and its chat template.

    Args:
        desc: a descriptor, or a registered version's ``metadata.prepared``.

    Raises:
        InvalidRequest: another tokenizer or chat template (``field="config.dataset"``).
    """
    want = tokenizer_fingerprint(tokenizer)
    if desc["tokenizer"].get("sha256") != want:
        raise InvalidRequest(
            f"the prepared rows were made with tokenizer {desc['tokenizer'].get('name') or '(unnamed)'} "
            f"(sha256 {str(desc['tokenizer'].get('sha256'))[:12]}…), but the base model has another "
            f"tokenizer (sha256 {want[:12]}…); prepare the rows again with the base model's tokenizer",
            field="config.dataset",
            code="prepared_tokenizer",
        )
    if desc["chatTemplate"].get("sha256") != template_fingerprint(tokenizer):
        raise InvalidRequest(
            "the prepared rows were made with another chat template than the base model's; "
            "prepare the rows again with the base model's tokenizer",
            field="config.dataset",
            code="prepared_tokenizer",
        )


def check_length(desc: dict[str, Any], max_seq_length: int) -> None:
    """F030: ``maxSeqLength`` holds the longest prepared row (rows are never truncated).

    Raises:
        InvalidRequest: ``max_seq_length`` < ``desc["longestRow"]``
            (``field="config.maxSeqLength"``).
    """
    if int(desc["longestRow"]) > max_seq_length:
        raise InvalidRequest(
            f"maxSeqLength {max_seq_length} is shorter than the longest prepared row "
            f"({desc['longestRow']} tokens); raise maxSeqLength to at least {desc['longestRow']}",
            field="config.maxSeqLength",
            code="prepared_too_long",
        )


def check_prepared(desc: dict[str, Any], tokenizer: Any, max_seq_length: int) -> None:
    """The guards of F030, from the descriptor alone (cheap; run before claiming devices):
    :func:`check_tokenizer`, then :func:`check_length`.

    Raises:
        InvalidRequest: another tokenizer or chat template, or ``max_seq_length`` shorter
            than the longest row.
    """
    check_tokenizer(desc, tokenizer)
    check_length(desc, max_seq_length)


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


# -- the registry's canonical form ---------------------------------------------------------


def header_of(desc: dict[str, Any], rows: int, longest: int, supervised: int) -> dict[str, Any]:
    """The first canonical line of a registered prepared dataset: what the tokens mean
    (tokenizer and chat template fingerprints, vocabulary size) and their counts. The
    tokenizer's name is left out, so the same tokens prepared from another copy of the
    same tokenizer are the same version."""
    return {
        "prepared": {
            "format": FORMAT,
            "version": 1,
            "tokenizer": {
                "sha256": desc["tokenizer"]["sha256"],
                "vocabSize": desc["tokenizer"]["vocabSize"],
            },
            "chatTemplate": {"sha256": desc["chatTemplate"]["sha256"]},
            "rows": rows,
            "longestRow": longest,
            "supervisedTokens": supervised,
        }
    }


def check_counts(desc: dict[str, Any], rows: int, longest: int, supervised: int) -> None:
    """The descriptor's counts must be what its files hold (a descriptor that says
    otherwise was written for other files).

    Raises:
        InvalidRequest: ``rows``, ``longestRow`` or ``supervisedTokens`` differ (named).
    """
    for key, have in (("rows", rows), ("longestRow", longest), ("supervisedTokens", supervised)):
        if key in desc and desc[key] != have:
            raise InvalidRequest(
                f"{DESCRIPTOR}: {key} is {desc[key]!r}, but the files hold {have}; "
                "write the folder again with the writer script",
                field=f"{DESCRIPTOR}:{key}",
            )


def examples_from_canonical(data: bytes) -> tuple[dict[str, Any], list[Example]]:
    """The header and the examples of a registered prepared dataset's canonical blob.

    Returns:
        ``(header["prepared"], examples)``: examples numbered 1.. in order, ``weights`` =
        ``loss_mask`` as floats (``input_ids`` ints, one weight per token).
    """
    lines = [line for line in data.splitlines() if line]
    header = json.loads(lines[0])["prepared"]
    examples = []
    for n, line in enumerate(lines[1:], start=1):
        row = json.loads(line)
        examples.append(Example(row["input_ids"], [float(m) for m in row["loss_mask"]], n))
    return header, examples


def main(argv: list[str] | None = None) -> int:
    """``python -m akka_optimize.data.prepared ROWS.jsonl --tokenizer DIR --out DIR``.

    Tokenizes a JSONL file of conversation rows with the tokenizer's chat template and a
    loss policy, and writes prepared token rows with their descriptor.
    """
    from transformers import AutoTokenizer

    from akka_optimize.data.jsonl import iter_jsonl_rows
    from akka_optimize.data.masks import prepare_examples
    from akka_optimize.data.policy import LossPolicy

    ap = argparse.ArgumentParser(
        prog="python -m akka_optimize.data.prepared", description=main.__doc__
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
