"""Data benchmark: rows/s tokenized *and masked* vs a plain ``apply_chat_template`` loop.

GSM8K-shaped rows (``data/gsm8k/train.jsonl``: question → user, answer → assistant) with
the SmolLM2 tokenizer. The baseline renders and tokenizes each row with
``apply_chat_template(messages, tokenize=True)`` and computes no mask at all; ours
validates the row, renders it (twice: real and with sentinels), tokenizes in batches with
offsets and maps the trained spans to per-token weights. ratio = ours / baseline (>1 is
faster than the plain loop).

And the dry run's dataset findings at the upload limit against findings over every row
(:func:`_findings_at_the_upload_limit`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO / "data" / "gsm8k" / "train.jsonl"


def _tokenizer():
    from transformers import AutoTokenizer

    from akka_optimize.catalog.gguf import convert_gguf, gguf_path

    cache = Path(os.environ.get("AKKA_OPTIMIZE_TEST_CACHE", REPO / ".cache" / "test-models"))
    dest = cache / "smollm2-tokenizer"
    if not (dest / "tokenizer.json").exists():
        convert_gguf(gguf_path(), dest, tokenizer_only=True)
    return AutoTokenizer.from_pretrained(dest)


def _rows(n: int) -> list[dict]:
    out = []
    with GSM8K.open() as f:
        for line in f:
            r = json.loads(line)
            out.append(
                {
                    "messages": [
                        {"role": "user", "content": r["question"]},
                        {"role": "assistant", "content": r["answer"]},
                    ]
                }
            )
            if len(out) == n:
                break
    return out


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool) -> list[dict]:
    """Rows/s of ``parse_row`` + ``encode_rows`` against the plain loop on the same rows."""
    from akka_optimize.data.masks import encode_rows
    from akka_optimize.data.policy import LossPolicy
    from akka_optimize.data.rows import parse_row

    tok = _tokenizer()
    raw = _rows(300 if quick else 3000)
    policy = LossPolicy()
    numbers = list(range(1, len(raw) + 1))

    def ours() -> None:
        rows = [parse_row(r, i) for i, r in zip(numbers, raw, strict=True)]
        encode_rows(tok, rows, policy, numbers)

    def plain() -> None:
        for r in raw:
            tok.apply_chat_template(r["messages"], tokenize=True)

    ours()  # warm the template cache
    plain()
    repeats = 1 if quick else 3
    t_ours, t_plain = _best(ours, repeats), _best(plain, repeats)
    value, base = len(raw) / t_ours, len(raw) / t_plain
    return [
        {
            "name": "data.tokenize_and_mask_gsm8k",
            "value": round(value, 1),
            "unit": "rows/s",
            "baseline": round(base, 1),
            "ratio": round(value / base, 3),
            "detail": f"{len(raw)} GSM8K rows, SmolLM2 tokenizer; baseline: apply_chat_template(tokenize=True) loop, no mask",
        },
        _findings_at_the_upload_limit(tok, quick),
    ]


UPLOAD_LIMIT = 256 * 2**20  # the registry's dataset upload limit (README "limits")
SCALE = 64  # the baseline times 1/SCALE of the rows


def _findings_at_the_upload_limit(tok, quick: bool) -> dict:
    """Seconds of the dry run's dataset findings (issue 48 item 8) over short rows filling
    the upload limit, read in place as the service reads them, against findings over every
    row (no sample) timed in the same run on 1/``SCALE`` of the rows and scaled to them
    all. ratio = baseline / ours (>1: faster than examining every row)."""
    from akka_optimize.data import findings as F
    from akka_optimize.data.policy import LossPolicy
    from akka_optimize.registry.blobs import canonical_line
    from akka_optimize.registry.row_view import JsonlRows

    size = UPLOAD_LIMIT // 64 if quick else UPLOAD_LIMIT
    lines, total, i = [], 0, 0
    while True:
        row = {
            "messages": [
                {"role": "user", "content": f"q {i}"},
                {"role": "assistant", "content": f"a {i % 97}"},
            ]
        }
        line = canonical_line(row)
        if total + len(line) > size:
            break
        lines.append(line)
        total, i = total + len(line), i + 1
    data = b"".join(lines)
    del lines
    t0 = time.perf_counter()
    rows = JsonlRows(data)
    f = F.findings(tok, rows, LossPolicy(), 2048, range(1, len(rows) + 1))
    ours = time.perf_counter() - t0
    # the baseline: findings over every row (no sample), as before issue 48 item 8, timed
    # on 1/SCALE of the rows and scaled to them all (the whole pass takes many minutes)
    part = JsonlRows(data[: data.index(b"\n", len(data) // SCALE) + 1])
    bound = F.FINDINGS_SAMPLE_ROWS, F.FINDINGS_SAMPLE_BYTES
    F.FINDINGS_SAMPLE_ROWS, F.FINDINGS_SAMPLE_BYTES = len(part), len(data)
    try:
        t0 = time.perf_counter()
        F.findings(tok, part, LossPolicy(), 2048, range(1, len(part) + 1))
        base = (time.perf_counter() - t0) * len(rows) / len(part)
    finally:
        F.FINDINGS_SAMPLE_ROWS, F.FINDINGS_SAMPLE_BYTES = bound
    sampled = f.get("sampled") or {"rows": len(rows)}
    return {
        "name": "data.dry_run_findings_at_upload_limit",
        "value": round(ours, 2),
        "unit": "s",
        "baseline": round(base, 1),
        "ratio": round(base / ours, 3),
        "detail": f"{len(rows)} short rows, {total / 2**20:.0f} MiB; token findings and near "
        f"duplicates over {sampled['rows']} sampled rows, exact duplicates over all; "
        f"baseline: findings over every row, timed on {len(part)} rows and scaled",
    }


if __name__ == "__main__":
    print(json.dumps(run(quick=True), indent=2))
