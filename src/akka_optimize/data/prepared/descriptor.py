"""The descriptor of prepared token rows (``prepared.json``, :mod:`akka_optimize.data.prepared.rows`):
its constants, the tokenizer and chat-template fingerprints it records, parsing and
checking it, and the guards of F030 a run passes from the descriptor alone
(:func:`check_prepared`: the same tokenizer and template, a ``maxSeqLength`` that holds
the longest row).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from akka_optimize.errors import InvalidRequest

DESCRIPTOR = "prepared.json"
FORMAT = "akka-optimize/prepared-token-rows"


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
