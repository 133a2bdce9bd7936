"""``asample`` on a training client's worker: completions of the weights a
``save_weights_and_get_sampling_client`` snapshot named, with the log-prob of every
sampled token (the reinforcement losses' ``logprobs``, TINKER-PROTOCOL.md §10).

The snapshot is the training session itself at the step it was taken: a sample asked
after a later ``optim_step`` is refused with a sentence (save again for new weights), so a
sample never silently comes from other weights than its client's. Generation is the
engine's (:func:`akka_optimize.engine.sampling.generate`: temperature, top-p, seed, stop
tokens); the log-probs are one forward of prompt and completion.
"""

from __future__ import annotations

import math
from typing import Any

from ..data.types import Pass
from .datums import DatumError


def _stops(session: Any, stop: Any) -> set[int] | None:
    """Stop token ids from ``sampling_params.stop`` (absent: the tokenizer's EOS)."""
    if stop is None:
        return None
    items = [stop] if isinstance(stop, str | int) else list(stop)
    ids: set[int] = set()
    for s in items:
        if isinstance(s, int):
            if not 0 <= s < session.vocab_size:
                raise DatumError(
                    f"sampling_params.stop holds token {s}, outside the model's vocabulary "
                    f"(0..{session.vocab_size - 1})."
                )
            ids.add(s)
            continue
        enc = session._tokenizer.encode(s, add_special_tokens=False)
        if len(enc) != 1:
            raise DatumError(
                f"sampling_params.stop {s!r} is {len(enc)} tokens; the platform stops on "
                "single tokens (give token ids or one-token strings)."
            )
        ids.add(enc[0])
    return ids


MIN_TEMPERATURE = 1e-6
"""The least non-zero ``temperature``: the engine divides float32 logits by it, and far
below this the quotient overflows to inf and the softmax to NaN."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def params_refusal(params: dict[str, Any]) -> str | None:
    """The sentence refusing the first ``sampling_params`` field the engine cannot honour
    as asked, or None. ``max_tokens`` a whole number ≥ 1 (absent: 16), ``temperature`` 0
    (greedy) or from :data:`MIN_TEMPERATURE` up and ``top_p`` in (0, 1] (OpenAI's range: above
    1 would silently mean 1, 0 keeps nothing). ``seed`` is bounded where it is decoded."""
    n = params.get("max_tokens")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return f"sampling_params.max_tokens is {n!r:.40}; give a whole number of at least 1."
    t = params.get("temperature", 1.0)
    if not _number(t) or not (t == 0 or MIN_TEMPERATURE <= t < math.inf):
        return (
            f"sampling_params.temperature is {t!r:.40}; give 0 (greedy) or a number of at "
            f"least {MIN_TEMPERATURE:g}."
        )
    p = params.get("top_p", 1.0)
    if not _number(p) or not 0 < p <= 1:
        return f"sampling_params.top_p is {p!r:.40}; give a number above 0 and at most 1."
    return None


def _check(body: dict[str, Any], step: int) -> dict[str, Any]:
    if body.get("snapshot_step") != step:
        raise DatumError(
            f"this sampling client holds the weights of step {body.get('snapshot_step')}, "
            f"but the training client has moved on to step {step}; call "
            "save_weights_and_get_sampling_client again."
        )
    params = body.get("sampling_params") or {}
    refusal = params_refusal(params)
    if refusal:
        raise DatumError(refusal)
    if params.get("top_k") not in (None, -1, 0):
        raise DatumError("sampling_params.top_k is not supported; leave it at -1.")
    for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k",
                "prompt_logprobs_last_n", "target_prompt_logprobs"):  # fmt: skip
        if body.get(key):
            raise DatumError(f"{key} is not served yet; leave it unset.")
    return params


def sample(session: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``num_samples`` completions of ``prompt`` under ``sampling_params``.

    Returns:
        ``{"sequences": [{"tokens", "logprobs", "stop_reason"}]}`` (``stop`` when the
        last token is a stop token, else ``length``), and with ``prompt_logprobs`` (what
        ``compute_logprobs`` asks) ``"prompt_logprobs"``: None, then each prompt token's.

    Raises:
        DatumError: the weights moved on, a prompt token outside the vocabulary, an option
            the engine cannot honour (the field named).
    """
    params = _check(body, session.step)
    prompt = [t for c in body["prompt"]["chunks"] for t in c.get("tokens", [])]
    if not prompt or any(not 0 <= t < session.vocab_size for t in prompt):
        raise DatumError("prompt is empty or holds a token outside the model's vocabulary.")
    if session._tokenizer is None:
        from transformers import AutoTokenizer

        session._tokenizer = AutoTokenizer.from_pretrained(session.model_dir)
    stops = _stops(session, params.get("stop"))
    max_tokens = int(params.get("max_tokens") or 16)
    seed = params.get("seed")
    out = []
    for i in range(int(body.get("num_samples") or 1)):
        new = session.sample(
            [prompt],
            max_tokens,
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            stop_ids=stops,
            seed=None if seed is None else int(seed) + i,
        )[0]
        ids = prompt + new
        n = len(ids)
        p = Pass(ids, [0.0] * len(prompt) + [1.0] * len(new), list(range(n)), [0, n])
        lps = session.forward([p]).logprobs[0][len(prompt) :].tolist()
        stopped = bool(new) and new[-1] in (stops or {session._tokenizer.eos_token_id})
        out.append({"tokens": new, "logprobs": lps, "stop_reason": "stop" if stopped else "length"})
    result: dict[str, Any] = {"sequences": out}
    if body.get("prompt_logprobs"):  # compute_logprobs: log p(x_t | x_<t); none at t = 0
        n = len(prompt)
        p = Pass(prompt, [0.0] + [1.0] * (n - 1), list(range(n)), [0, n])
        result["prompt_logprobs"] = [None] + session.forward([p]).logprobs[0][1:].tolist()
    return result
