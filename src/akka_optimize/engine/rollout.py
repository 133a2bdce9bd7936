"""The rollout of a reinforcement update (step 1 of :mod:`akka_optimize.engine.rl.loop`):
sampling each prompt's group of completions with a KV cache (:func:`sample_group`,
batched to the rollout's memory budget) and turning the samples into training passes
with their reinforcement inputs (:func:`rollout_passes`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..data.types import Pass
from .lean_decode import LeanDecoder
from .rl.settings import RLPrompt, RLSettings, Sample, kv_bytes_per_token, rows_that_fit
from .sampling import kv_cache


@torch.no_grad()
def sample_group(
    session: Any,
    prompt_ids: list[int],
    n: int,
    max_new_tokens: int,
    temperature: float,
    stop_ids: set[int],
    generator: torch.Generator,
    prefix_caching: bool = True,
    max_batched_tokens: int | None = None,
    lean: bool = True,
) -> list[tuple[list[int], list[float]]]:
    """``n`` completions of one prompt, decoded together with a KV cache: per completion
    its tokens and the sampler's log-probs (see the module docstring, step 1). With
    ``prefix_caching`` the prompt is read once and its cache copied to the ``n`` rows (a
    shared prefix); without, the ``n`` rows read it side by side. The prompt is read in
    pieces so that no forward pass reads more than ``max_batched_tokens`` tokens (all rows
    together; None: no limit). With ``lean`` the tokens after the prompt are decoded by
    :class:`~akka_optimize.engine.lean_decode.LeanDecoder` steps where the model allows:
    the same logits bit for bit (the session's adapter computed beside the base weights,
    in its mixed precision), so the same samples from the same generator, with less
    per-token overhead (issue 24 item 3).

    Raises:
        ValueError: an empty prompt, ``n`` < 1, ``max_new_tokens`` < 1, ``temperature`` ≤ 0,
            or ``max_batched_tokens`` below ``n`` (a decode step reads one token per row).
    """
    if not prompt_ids or n < 1 or max_new_tokens < 1 or temperature <= 0:
        raise ValueError("sample_group needs a prompt, n ≥ 1, max_new_tokens ≥ 1, temperature > 0")
    if max_batched_tokens is not None and max_batched_tokens < n:
        raise ValueError(f"max_batched_tokens {max_batched_tokens} is below the {n} rows")
    rows = 1 if prefix_caching else n
    piece = len(prompt_ids)
    if max_batched_tokens is not None:
        piece = max(1, min(piece, max_batched_tokens // rows))
    model = session.model
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    tokens: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    done = [False] * n
    try:
        with session.compute_context():
            # the prompt is read once (or by every row) in pieces, then its KV cache is
            # copied to every row of the group
            ids = torch.tensor([prompt_ids] * rows, dtype=torch.long, device=device)
            cache: dict[str, Any] = {}
            for at in range(0, len(prompt_ids), piece):
                out = model(
                    input_ids=ids[:, at : at + piece], use_cache=True, logits_to_keep=1, **cache
                )
                cache = kv_cache(out)
            if rows == 1 and n > 1:
                next(iter(cache.values())).batch_repeat_interleave(n)
            logits = out.logits[:, -1, :].expand(n, -1)
            fast = LeanDecoder.for_model(model) if lean and max_new_tokens > 1 else None
            if fast is not None and not fast.start(next(iter(cache.values())), max_new_tokens):
                fast = None
            for i in range(max_new_tokens):
                logq = torch.log_softmax(logits.float().cpu() / temperature, dim=-1)
                picked = torch.multinomial(logq.exp(), 1, generator=generator).view(-1)
                for b in range(n):
                    if done[b]:
                        continue
                    tok = int(picked[b])
                    tokens[b].append(tok)
                    lps[b].append(float(logq[b, tok]))
                    done[b] = tok in stop_ids
                if all(done) or i == max_new_tokens - 1:
                    break  # nothing more to sample: no step for a token never drawn
                step = picked.view(n, 1).to(device)
                if fast is not None:
                    logits = fast.step(step)
                else:
                    out = model(input_ids=step, use_cache=True, **kv_cache(out))
                    logits = out.logits[:, -1, :]
    finally:
        model.train(was_training)
    return list(zip(tokens, lps, strict=True))


def rollout_passes(
    prompts: list[RLPrompt],
    samples: list[Sample],
    pack: bool = False,
    token_inputs: dict[str, list[list[float]]] | None = None,
) -> tuple[list[Pass], list[dict[str, list[float]]]]:
    """The passes of ``samples`` (prompt + completion each) and their reinforcement inputs,
    aligned to ``input_ids`` like :attr:`Pass.weights`: weight 1 on completion tokens, 0 on
    the prompt; ``sampling_logprobs`` and ``advantages`` set on the completion tokens.

    ``token_inputs`` adds (or replaces) inputs by name: per sample, one float per
    completion token (0 on the prompt), e.g. the loss ``weights`` of the aggregation.

    One pass per sample, or with ``pack`` (a session whose attention keeps packed
    sequences apart: ``TrainingSession._packed_attention``) one pass per group, its
    samples side by side with their own positions and boundaries — never one sample
    twice (rule 18)."""
    singles = []
    for j, s in enumerate(samples):
        prompt = prompts[s.group].prompt_ids
        k = len(prompt)
        ids = list(prompt) + list(s.tokens)
        named = {
            "sampling_logprobs": [0.0] * k + list(s.logprobs),
            "advantages": [0.0] * k + [s.advantage] * len(s.tokens),
        }
        for key, per_sample in (token_inputs or {}).items():
            named[key] = [0.0] * k + list(per_sample[j])
        singles.append((s.group, ids, [0.0] * k + [1.0] * len(s.tokens), named))
    groups: list[list[tuple]] = []
    for item in singles:
        if pack and groups and groups[-1][0][0] == item[0]:
            groups[-1].append(item)
        else:
            groups.append([item])
    passes, inputs = [], []
    for members in groups:
        ids, weights, pos, cu = [], [], [], [0]
        named: dict[str, list[float]] = {key: [] for key in members[0][3]}
        for _g, i, w, values in members:
            ids += i
            weights += w
            pos += list(range(len(i)))
            cu.append(len(ids))
            for key, v in values.items():
                named[key] += v
        passes.append(Pass(ids, weights, pos, cu, [m[0] for m in members]))
        inputs.append(named)
    return passes, inputs


def per_sample(values: list[torch.Tensor], passes: list[Pass]) -> list[list[float]]:
    """Per-pass values aligned like :attr:`Pass.weights` (e.g. a forward's ``logprobs``)
    back to one list per sample, its completion tokens' values, in the samples' order
    (the inverse of :func:`rollout_passes`' layout)."""
    out = []
    for v, p in zip(values, passes, strict=True):
        for a, b in zip(p.cu_seqlens[:-1], p.cu_seqlens[1:], strict=True):
            out.append([float(v[t]) for t in range(a, b) if p.weights[t]])
    return out


def sample_rollouts(
    session: Any,
    prompts: list[RLPrompt],
    settings: RLSettings,
    stop_ids: set[int],
    gens: list[torch.Generator],
    version: int,
) -> list[Sample]:
    """``samplesPerPrompt`` completions of every prompt, group ``g`` for ``prompts[g]``
    drawn from ``gens[g]`` (one generator may serve several groups, in order), decoded in
    batches of as many rows as the rollout KV-cache budget holds (:func:`rows_that_fit`),
    each tagged with the weight ``version`` that sampled it."""
    samples: list[Sample] = []
    per_token = kv_bytes_per_token(session.model.config, next(session.model.parameters()).dtype)
    for g, prompt in enumerate(prompts):
        batch = rows_that_fit(settings, per_token, len(prompt.prompt_ids))
        for first in range(0, settings.samples_per_prompt, batch):
            for toks, lps in sample_group(
                session,
                prompt.prompt_ids,
                min(batch, settings.samples_per_prompt - first),
                settings.max_new_tokens,
                settings.temperature,
                stop_ids,
                gens[g],
                prefix_caching=settings.prefix_caching,
                max_batched_tokens=settings.max_num_batched_tokens,
            ):
                samples.append(Sample(g, toks, lps, version))
    return samples
