"""Batched decoding: concurrent requests for the same model share forward passes.

On a CPU, and for small models on a GPU, decoding one token of one answer is bound
by reading the weights, so answering B requests in one batch costs little more
than answering one. The engine's batch thread takes the requests waiting for the
same adapter (up to ``max_rows`` answers), left-pads their prompts (attention
mask + position ids, so padding changes no answer), and runs one KV-cached
decoding loop for all of them; each answer streams to its own queue and ends on
its own stop token, stop string or ``max_tokens``. Sampling uses one generator
per request, so a seeded request gets the same answer alone or in a batch. A request
with ``choice`` (guided choice) has every other token's logit set to ``-inf`` before
its token is picked (:func:`allowed_tokens`). Penalties and ``logit_bias`` change the
logits a request picks from (:func:`adjusted`); ``logprobs`` are read from the model's own
logits of the same step (:func:`token_logprobs`).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

from ..engine.lean_decode import LeanDecoder
from .engine import SamplingParams, StepEvent, logprob_entry


@dataclass
class Request:
    """One chat completion waiting to be decoded; events arrive on ``out``."""

    prompt_ids: list[int]
    adapter: str | None
    params: SamplingParams
    out: queue.Queue = field(default_factory=queue.Queue)
    cancelled: bool = False
    generator: Any = None
    choice_ids: list[list[int]] | None = None


@dataclass
class _Row:
    """One answer of one request: its tokens, text and what has been sent."""

    req: Request
    index: int
    hold: int
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    done: bool = False
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # not sent yet


def first_stop(text: str, stops: list[str]) -> int | None:
    """Index of the earliest stop string in ``text``, or None."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def _feed(row: _Row, tok: int, step: int, stop_ids: set[int], tokenizer: Any) -> StepEvent | None:
    """Advance ``row`` by token ``tok`` chosen at decoding ``step``; the event to send."""
    p = row.req.params
    reason = None
    if tok in stop_ids:
        reason = "stop"
    else:
        row.tokens.append(tok)
        row.text = tokenizer.decode(row.tokens, skip_special_tokens=True)
        cut = first_stop(row.text, p.stop)
        if cut is not None:
            row.text, reason = row.text[:cut], "stop"
        elif step == p.max_tokens - 1:
            reason = "length"
    if reason:
        row.done = True
        used = len(row.tokens) + (reason == "stop" and tok in stop_ids)
        ev = StepEvent(row.index, row.text[row.sent :], reason, int(used), row.logprobs)
        row.sent, row.logprobs = len(row.text), []
        return ev
    safe = len(row.text) - row.hold
    if row.text.endswith("\ufffd"):
        safe = min(safe, len(row.text) - 1)
    if safe > row.sent:
        ev = StepEvent(row.index, row.text[row.sent : safe], logprobs=row.logprobs)
        row.sent, row.logprobs = safe, []
        return ev
    return None


def allowed_tokens(done: list[int], choices: list[list[int]], stop_ids: set[int]) -> list[int]:
    """The tokens an answer limited to ``choices`` (token-id sequences) may take next,
    after ``done``: the next token of every choice that ``done`` begins, and the stop
    tokens once ``done`` is a whole choice. Empty when ``done`` left every choice (the
    caller then ends the answer with a stop token)."""
    k = len(done)
    nxt = {c[k] for c in choices if len(c) > k and c[:k] == done}
    if any(c == done for c in choices):
        nxt |= stop_ids
    return sorted(nxt)


def _guide(logits: Any, rows: list[_Row], idx: list[int], stop_ids: set[int]) -> Any:
    """``logits`` (k, V) of the rows ``idx`` of a guided request, every token that no
    choice allows set to ``-inf``."""
    import torch

    out = torch.full_like(logits, float("-inf"))
    for j, b in enumerate(idx):
        row = rows[b]
        ok = allowed_tokens(row.tokens, row.req.choice_ids or [], stop_ids) or sorted(stop_ids)
        sel = torch.tensor(ok, dtype=torch.long, device=logits.device)
        out[j, sel] = logits[j, sel]
    return out


#: Temperatures below this decode greedily (vLLM's ``_SAMPLING_EPS``): dividing the logits
#: by a smaller one overflows float32 and leaves no distribution to sample.
GREEDY_BELOW = 1e-5


def pick(logits: Any, params: SamplingParams, gen: Any) -> Any:
    """Next tokens for ``logits`` (k, V) float32: argmax at a temperature below
    :data:`GREEDY_BELOW` (0 included), else nucleus sampling with ``gen``."""
    import torch

    if params.temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        keep = sp.cumsum(dim=-1) - sp < params.top_p
        keep[:, 0] = True  # the most likely token, even for a top_p below float32's range
        probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
    return torch.multinomial(probs, 1, generator=gen).view(-1)


def _batch_rows(
    requests: list[Request], tokenizer: Any, device: str
) -> tuple[list[_Row], list[tuple[Request, list[int]]]]:
    """One row per answer (``n`` per request), and each request's row indices. Seeds each
    request's generator (its ``seed``, else a fresh one) and tokenizes guided choices."""
    import torch

    rows: list[_Row] = []
    spans: list[tuple[Request, list[int]]] = []
    for r in requests:
        r.generator = torch.Generator(device=device)
        r.generator.manual_seed(r.params.seed if r.params.seed is not None else torch.seed())
        if r.params.choice:
            r.choice_ids = [
                [int(t) for t in tokenizer.encode(c, add_special_tokens=False)]
                for c in r.params.choice
            ]
        hold = max((len(s) for s in r.params.stop), default=1) - 1
        spans.append((r, list(range(len(rows), len(rows) + r.params.n))))
        rows.extend(_Row(r, i, hold) for i in range(r.params.n))
    return rows, spans


def _left_padded(rows: list[_Row], lengths: list[int], tokenizer: Any) -> tuple[Any, Any]:
    """The rows' prompts left-padded to the longest: ``ids`` and the attention ``mask``,
    both int64 of shape ``[rows, longest prompt]`` on the CPU."""
    import torch

    width, n = max(lengths), len(rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - lengths[b] :] = torch.tensor(row.req.prompt_ids, dtype=torch.long)
        mask[b, width - lengths[b] :] = 1
    return ids, mask


def adjusted(logits: Any, answers: list[list[int]], params: SamplingParams) -> Any:
    """``logits`` (k, V) float32 of ``k`` answers so far ``answers`` (their generated
    token ids) with ``params``' penalties and ``logit_bias`` applied: OpenAI's
    ``logit - count · frequency_penalty - (count > 0) · presence_penalty + bias``,
    ``count`` being how often the answer holds the token. Unchanged (the same tensor)
    when the request sets none of them."""
    import torch

    fp, pp, bias = params.frequency_penalty, params.presence_penalty, params.logit_bias
    if not (fp or pp or bias):
        return logits
    out = logits.clone()
    if fp or pp:
        counts = torch.zeros_like(out)
        for j, toks in enumerate(answers):
            if toks:
                t = torch.tensor(toks, dtype=torch.long, device=out.device)
                counts[j].index_add_(0, t, torch.ones_like(t, dtype=out.dtype))
        out -= counts * fp + (counts > 0).to(out.dtype) * pp
    if bias:
        ids = torch.tensor(list(bias), dtype=torch.long, device=out.device)
        out[:, ids] += torch.tensor(list(bias.values()), dtype=out.dtype, device=out.device)
    return out


def token_logprobs(logits: Any, chosen: Any, top: int) -> list[tuple[float, list]]:
    """Per row of ``logits`` (k, V) float32: the log probability of the ``chosen`` token
    (int64 ``[k]``) and the ``top`` most likely (token id, log probability) pairs, most
    likely first, from ``log_softmax(logits)``."""
    import torch

    lp = torch.log_softmax(logits, dim=-1)
    mine = lp.gather(1, chosen.view(-1, 1)).view(-1).tolist()
    vals, ids = lp.topk(top, dim=-1) if top else (lp[:, :0], lp[:, :0].long())
    return [
        (mine[j], list(zip(ids[j].tolist(), vals[j].tolist(), strict=True)))
        for j in range(len(mine))
    ]


def _choose(
    logits: Any, rows: list[_Row], spans: list, stop_ids: set[int]
) -> tuple[Any, dict[int, tuple[float, list]]]:
    """The next token of every row (int64 ``[rows]``) from ``logits`` (``[rows, V]``
    float32): each request picks with its own sampling settings and generator. Also, for
    the rows of requests that ask for ``logprobs``, row -> :func:`token_logprobs` of the
    model's logits."""
    import torch

    nxt = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    logprobs: dict[int, tuple[float, list]] = {}
    for r, idx in spans:
        part = adjusted(logits[idx], [rows[b].tokens for b in idx], r.params)
        if r.choice_ids is not None:
            part = _guide(part, rows, idx, stop_ids)
        nxt[idx] = pick(part, r.params, r.generator)
        if r.params.logprobs is not None:
            found = token_logprobs(logits[idx], nxt[idx], r.params.logprobs)
            logprobs.update(zip(idx, found, strict=True))
    return nxt, logprobs


def _emit(
    rows: list[_Row],
    chosen: list[int],
    step: int,
    stop_ids: set[int],
    tok: Any,
    logprobs: dict[int, tuple[float, list]],
) -> None:
    """Feed each unfinished row its chosen token and send what it now says (a cancelled
    request's rows end without a word). A chosen token the answer keeps (not a stop
    token) adds its entry of ``logprobs`` to what the row sends next."""
    for b, row in enumerate(rows):
        if row.done:
            continue
        if row.req.cancelled:
            row.done = True
            continue
        if b in logprobs and chosen[b] not in stop_ids:
            mine, top = logprobs[b]
            row.logprobs.append(logprob_entry(tok, chosen[b], mine, top))
        ev = _feed(row, chosen[b], step, stop_ids, tok)
        if ev is not None:
            row.req.out.put(ev)


def decode_batch(
    model: Any,
    tokenizer: Any,
    stop_ids: set[int],
    cache_kw: str,
    device: str,
    requests: list[Request],
    lean: bool = True,
) -> bool:
    """Decode every request of ``requests`` (same adapter, already selected) together.

    Prompts are left-padded; with equal prompt lengths no mask is passed, so a lone
    request runs exactly as an unbatched one. An answer that ends leaves the batch (its
    rows of the KV cache are dropped), so short answers do not keep paying for the
    longest one. The prompt is read by the model's forward; with ``lean`` the steps after
    it run as :class:`~akka_optimize.engine.lean_decode.LeanDecoder` steps where the
    model's architecture allows (same answers, less per-token overhead).

    Returns:
        Whether the lean steps decoded this batch.
    """
    import torch

    fast = LeanDecoder.for_model(model) if lean else None
    rows, spans = _batch_rows(requests, tokenizer, device)
    lengths = [len(row.req.prompt_ids) for row in rows]
    width, n = max(lengths), len(rows)
    ids, mask = _left_padded(rows, lengths, tokenizer)
    padded = min(lengths) != width
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
    last_pos = pos[:, -1:]
    kw: dict[str, Any] = {"attention_mask": mask, "position_ids": pos} if padded else {}
    past = None
    steps = max(r.params.max_tokens for r in requests)
    with torch.inference_mode():
        for step in range(steps):
            if fast is not None and past is None and step > 0:
                logits = fast.step(ids, last_pos if padded else None, mask if padded else None)
                logits = logits.float()
            else:
                if past is not None:
                    kw[cache_kw] = past
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw)
                past = out.cache if cache_kw == "cache" else out.past_key_values
                logits = out.logits[:, -1, :].float()
                if fast is not None and step == 0:
                    if fast.start(past, steps):
                        past = None  # the lean steps hold the KV cache from here
                    else:
                        fast = None
            nxt, logprobs = _choose(logits, rows, spans, stop_ids)
            _emit(rows, nxt.tolist(), step, stop_ids, tokenizer, logprobs)
            if all(row.done for row in rows):
                break
            keep = [b for b, row in enumerate(rows) if not row.done]
            if len(keep) < n:  # finished answers leave the batch (and the KV cache)
                sel = torch.tensor(keep, device=nxt.device)
                if past is None:
                    fast.keep(sel)
                else:
                    past.batch_select_indices(sel)
                nxt, rows, n = nxt[sel], [rows[b] for b in keep], len(keep)
                if padded:
                    mask, last_pos = mask[sel], last_pos[sel]
                spans = [(r, [b for b, row in enumerate(rows) if row.req is r]) for r, _ in spans]
                spans = [(r, idx) for r, idx in spans if idx]
            ids = nxt.view(n, 1)
            if padded:
                mask = torch.cat([mask, mask.new_ones((n, 1))], dim=1)
                last_pos = last_pos + 1
                kw.update(attention_mask=mask, position_ids=last_pos)
    return fast is not None and steps > 1
