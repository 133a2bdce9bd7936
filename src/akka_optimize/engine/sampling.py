"""Token-by-token generation with a KV cache, for one prompt.

Used by the trainer's own checks after training (behaviours.md 3 and 7) and small
enough to read: greedy at ``temperature == 0``, otherwise temperature scaling then
nucleus (top-p) filtering, drawn from a seeded generator so a seed repeats a sample.
The served = trained check's prompts (:mod:`akka_optimize.engine.check_prompts`) are
answered here too (:func:`check_answers`): by the training worker with the adapter it has just trained,
and by the post-deploy check (:mod:`akka_optimize.serving.check`) with the saved one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .check_prompts import CHECK_MAX_TOKENS, CHECK_PROMPTS, check_prompt_ids


def _pick(logits_V: Tensor, temperature: float, top_p: float, gen: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits_V))
    probs_V = torch.softmax(logits_V.float() / temperature, dim=-1).cpu()
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs_V, descending=True)
        keep = torch.cumsum(sorted_p, 0) - sorted_p < top_p  # smallest set reaching top_p
        keep[0] = True  # the most likely token always (a top_p below fp32's range keeps none)
        probs_V = torch.zeros_like(probs_V).scatter(0, order[keep], sorted_p[keep])
    return int(torch.multinomial(probs_V, 1, generator=gen))


def kv_cache(out: object) -> dict[str, object]:
    """The keyword that hands a forward pass's KV cache to the next one.

    transformers renamed ``past_key_values`` to ``cache`` (output field and forward
    argument together, between 5.17 and 5.20); the name is read from the output itself,
    so generation works on either side of the rename.

    Returns:
        ``{"cache": c}`` or ``{"past_key_values": c}``.
    """
    if hasattr(out, "cache"):
        return {"cache": out.cache}
    return {"past_key_values": out.past_key_values}


def stopped_on(tokenizer: Any, new_ids: list[int], stop_strings: Sequence[str]) -> bool:
    """Whether the decoded ``new_ids`` (special tokens kept, as the cookbook's renderers
    decode a completion) contain one of ``stop_strings``. Empty strings never match."""
    if not stop_strings:
        return False
    text = tokenizer.decode(new_ids)
    return any(s and s in text for s in stop_strings)


@torch.no_grad()
def generate(
    model: nn.Module,
    tokenizer,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop_ids: set[int] | None = None,
    seed: int | None = None,
    *,
    stop_strings: Sequence[str] = (),
    eos_default: bool = True,
) -> list[int]:
    """Continue ``prompt_ids`` by at most ``max_new_tokens`` tokens.

    Args:
        model: a causal LM (a PEFT model generates with its adapter).
        tokenizer: gives the default stop token (its EOS) when ``stop_ids`` and
            ``stop_strings`` are empty and ``eos_default`` holds, and decodes the
            completion when ``stop_strings`` are given.
        temperature: 0 is greedy; otherwise logits are divided by it.
        top_p: nucleus mass kept when sampling (1.0 keeps everything).
        stop_ids: generation ends after emitting one of these ids.
        seed: seeds the sampling generator (CPU); ``None`` uses the global RNG.
        stop_strings: generation ends after the token whose addition makes the decoded
            completion (the new tokens only, special tokens kept) contain one of these;
            that token is kept, so the text may run past the string's end within it
            (the tinker SDK's stop sequences, see :func:`stopped_on`).
        eos_default: False leaves out the EOS default (tinker's ``stop=[]``: no stop).

    Returns:
        The new token ids; the last one is a stop id, or completes a stop string, if
        generation stopped by itself.

    Raises:
        ValueError: an empty prompt or ``max_new_tokens`` < 1.
    """
    if not prompt_ids or max_new_tokens < 1:
        raise ValueError("generate needs a non-empty prompt and max_new_tokens ≥ 1")
    stops = set(stop_ids or ())
    eos = getattr(tokenizer, "eos_token_id", None)
    if not stops and not stop_strings and eos_default and eos is not None:
        stops = {eos}
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        new: list[int] = []
        for _ in range(max_new_tokens):
            tok = _pick(out.logits[0, -1], temperature, top_p, gen)
            new.append(tok)
            if tok in stops or stopped_on(tokenizer, new, stop_strings):
                break
            step = torch.tensor([[tok]], dtype=torch.long, device=device)
            out = model(input_ids=step, use_cache=True, **kv_cache(out))
        return new
    finally:
        model.train(was_training)


def check_answer_ids(
    model: nn.Module,
    tokenizer: Any,
    stop_ids: set[int],
    *,
    instructions: str | None = None,
    prompts: tuple[str, ...] = CHECK_PROMPTS,
    max_tokens: int = CHECK_MAX_TOKENS,
) -> list[tuple[list[int], list[int]]]:
    """Greedy answers of ``model`` (a PEFT model answers with its active adapter) to
    ``prompts`` templated by :func:`check_prompt_ids`, each at most ``max_tokens`` tokens:
    ``(prompt ids, answer ids)`` per prompt, the answer's last id a stop id when it
    stopped by itself."""
    out = []
    for p in prompts:
        ids = check_prompt_ids(tokenizer, p, instructions)
        out.append((ids, generate(model, tokenizer, ids, max_tokens, stop_ids=stop_ids)))
    return out


def answer_text(tokenizer: Any, answer_ids: list[int], stop_ids: set[int]) -> str:
    """An answer's text as an endpoint returns it: decoded without the stop tokens and
    special tokens."""
    return tokenizer.decode([t for t in answer_ids if t not in stop_ids], skip_special_tokens=True)


def check_answers(model: nn.Module, tokenizer: Any, stop_ids: set[int], **kw: Any) -> list[str]:
    """:func:`check_answer_ids` as text (:func:`answer_text`): what an endpoint answers
    at temperature 0 with the same weights."""
    return [
        answer_text(tokenizer, a, stop_ids)
        for _, a in check_answer_ids(model, tokenizer, stop_ids, **kw)
    ]


@torch.no_grad()
def answer_logprobs(model: nn.Module, prompt_ids: list[int], answer_ids: list[int]) -> list[float]:
    """The log-probability (nats, fp32) ``model`` gives each of ``answer_ids`` fed after
    ``prompt_ids``, one forward pass over both (in eval mode; the mode is restored)."""
    if not answer_ids:
        return []
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        full = torch.tensor([prompt_ids + answer_ids], dtype=torch.long, device=device)
        logits = model(input_ids=full).logits[0, len(prompt_ids) - 1 : -1].float()
    finally:
        model.train(was_training)
    lp = torch.log_softmax(logits, dim=-1)
    picked = lp.gather(1, torch.tensor(answer_ids, device=device)[:, None]).squeeze(1)
    return [float(x) for x in picked.cpu()]
