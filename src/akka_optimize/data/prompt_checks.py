"""Trained assistant turns whose text is not what an endpoint generates them from
(:func:`prompt_mismatches`; issue 15 item 5, issue 47 item 13): a turn's prompt rendered
as an endpoint renders a request, and the conversation ending with the turn, must both be
token prefixes of the row's tokens. Training refuses such rows
(:func:`akka_optimize.data.masks.encode_rows`), so the dataset findings list them under
``refused_rows`` and ``data preview`` shows their error.
"""

from __future__ import annotations

from typing import Any

from akka_optimize import cancel
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.sentinels import render_messages, sentinel_row


def prompt_mismatches(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    policy: LossPolicy,
    row_numbers: list[int],
    ids: list[list[int]],
) -> dict[int, list[str]]:
    """Trained assistant turns whose text is not what an endpoint generates them from.

    For each trained assistant turn ``i`` of a row (whose full rendering tokenized to its
    entry of ``ids``), two renderings must be token prefixes of the row's tokens: the
    conversation before it with the generation prompt, as an endpoint renders a request
    (else the prompt is written or tokenized differently at generation), and the
    conversation ending with turn ``i`` (else the template writes the turn otherwise once
    later turns follow, so it would train on text it is never generated as). Issue 15
    item 5, issue 47 item 13; training refuses the row). Conversations without tools are
    rendered in one call per kind, and tokenized in one batch.

    Returns:
        ``{row number: [sentences starting "row N: messages[i]"]}`` for rows with a
        mismatch; rows without one are absent.
    """
    checks: list[tuple[int, int, bool, list[dict], Any]] = []  # row index, turn, gp, conv
    for r, row in enumerate(rows):
        if r % 256 == 0:
            cancel.check()
        real, _sent, tools, _sent_tools, _fields = sentinel_row(row)
        turns = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        for i in turns if policy.assistant_turns == "all" else turns[-1:]:
            checks.append((r, i, True, real[:i], tools))
            if i + 1 < len(real):
                checks.append((r, i, False, real[: i + 1], tools))
    texts = _render_checks(tokenizer, checks)
    encoded = tokenizer.backend_tokenizer.encode_batch(
        [t for t in texts if isinstance(t, str)], add_special_tokens=False
    )
    tokens = iter(encoded)
    out: dict[int, list[str]] = {}
    prompt_failed: set[tuple[int, int]] = set()
    for (r, i, gp, _conv, _tools), text in zip(checks, texts, strict=True):
        n = row_numbers[r]
        where = f"row {n}: messages[{i}]"
        if not isinstance(text, str):
            out.setdefault(n, []).append(
                f"{where}: the chat template cannot render the turn's prompt: {text}"
            )
            prompt_failed.add((r, i))
            continue
        t = next(tokens).ids
        if ids[r][: len(t)] == t or (r, i) in prompt_failed:
            continue
        k = _first_difference(t, ids[r])
        if gp:
            prompt_failed.add((r, i))
            out.setdefault(n, []).append(
                f"{where}: its prompt as an endpoint renders it ({len(t)} tokens, with the "
                f"generation prompt) is not a prefix of the row's tokens (they differ at token "
                f"{k}); the turn trains after text it is never generated from"
            )
        else:
            out.setdefault(n, []).append(
                f"{where}: the chat template writes this turn otherwise once later turns "
                f"follow than where it is generated (they differ at token {k}); it would "
                "train on text it is never generated as. Train only the last turn "
                "(config.loss.assistantTurns: last) or split the row"
            )
    return out


def _render_checks(
    tokenizer: Any, checks: list[tuple[int, int, bool, list[dict], Any]]
) -> list[str | Exception]:
    """Texts of :func:`prompt_mismatches`'s conversations: those without tools in one
    ``apply_chat_template`` call per generation-prompt setting, the others one by one; a
    conversation the template refuses gets its exception."""
    texts: list[str | Exception] = [ValueError("not rendered")] * len(checks)
    for gp in (True, False):
        plain = [k for k, c in enumerate(checks) if c[2] is gp and not c[4]]
        if plain:
            try:
                batch = render_messages(
                    tokenizer, [checks[k][3] for k in plain], None, add_generation_prompt=gp
                )
                for k, text in zip(plain, batch, strict=True):
                    texts[k] = text
            except Exception:  # one conversation made the template raise: one by one below
                pass
    for k, (_r, _i, gp, conv, tools) in enumerate(checks):
        if isinstance(texts[k], str):
            continue
        try:
            texts[k] = render_messages(tokenizer, conv, tools, add_generation_prompt=gp)
        except Exception as exc:  # the template's own refusal (raise_exception, TypeError…)
            texts[k] = exc
    return texts


def _first_difference(a: list[int], b: list[int]) -> int:
    """The first 0-based index where ``a`` and ``b`` differ (or the shorter's length)."""
    return next(
        (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
