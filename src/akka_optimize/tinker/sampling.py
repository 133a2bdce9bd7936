"""``asample`` on a training client's worker: completions of the weights a
``save_weights_and_get_sampling_client`` snapshot named, with the log-prob of every
sampled token (the reinforcement losses' ``logprobs``, TINKER-PROTOCOL.md §10).

The snapshot is the training session itself at the step it was taken: a sample asked
after a later ``optim_step`` is refused with a sentence (save again for new weights), so a
sample never silently comes from other weights than its client's. Generation is the
engine's (:func:`akka_optimize.engine.sampling.generate`: temperature, top-p, seed, stop
tokens, stop strings on the decoded text); the log-probs are one forward of prompt and
completion, so they stay one per returned token.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from ..data.types import Pass
from ..engine.sampling import stopped_on
from .datums import DatumError


class Stops(NamedTuple):
    """What ends a completion: token ids, stop strings, and whether EOS is the default."""

    ids: set[int] | None
    strings: tuple[str, ...]
    eos_default: bool


def stops(session: Any, stop: Any) -> Stops:
    """``sampling_params.stop`` as the tinker 0.38 SDK documents it (``SamplingParams.stop``).

    ``None`` keeps the implicit EOS stop; ``[]`` disables every stop, EOS included, so
    generation runs to ``max_tokens``; token ids stop on that token; strings (a string or a
    list of them, of any number of tokens, e.g. the cookbook's ``role_colon`` renderer's
    ``"\\n\\nUser:"``) stop on the decoded completion text. EOS stays a stop beside any
    non-empty list (only ``[]`` turns it off). The completion keeps the token that completed
    a stop string (its text can run past the string's end inside that token), as the
    cookbook's ``parse_response`` expects: it splits the decoded tokens on the string.

    Raises:
        DatumError: an empty string, or a token id outside the vocabulary (``sampling_params.stop``).
    """
    if stop is None:
        return Stops(None, (), True)
    items = [stop] if isinstance(stop, str | int) else list(stop)
    ids: set[int] = set()
    strings: list[str] = []
    for s in items:
        if isinstance(s, int) and not isinstance(s, bool):
            if not 0 <= s < session.vocab_size:
                raise DatumError(
                    f"sampling_params.stop holds token {s}, outside the model's vocabulary "
                    f"(0..{session.vocab_size - 1})."
                )
            ids.add(s)
        elif isinstance(s, str) and s:
            strings.append(s)
        else:
            raise DatumError(
                f"sampling_params.stop holds {s!r:.40}; give non-empty strings or token ids."
            )
    eos = session._tokenizer.eos_token_id
    if items and eos is not None:
        ids.add(eos)
    return Stops(ids, tuple(strings), False)


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
        last token is a stop token or completes a stop string (:func:`stops`), else
        ``length``), and with ``prompt_logprobs`` (what
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
    stop = stops(session, params.get("stop"))
    ends = stop.ids if stop.ids is not None else {session._tokenizer.eos_token_id}
    max_tokens = int(params.get("max_tokens") or 16)
    seed = params.get("seed")
    out = []
    for i in range(int(body.get("num_samples") or 1)):
        new = session.sample(
            [prompt],
            max_tokens,
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            stop_ids=stop.ids,
            seed=None if seed is None else int(seed) + i,
            stop_strings=stop.strings,
            eos_default=stop.eos_default,
        )[0]
        ids = prompt + new
        n = len(ids)
        p = Pass(ids, [0.0] * len(prompt) + [1.0] * len(new), list(range(n)), [0, n])
        lps = session.forward([p]).logprobs[0][len(prompt) :].tolist()
        stopped = bool(new) and (
            new[-1] in ends or stopped_on(session._tokenizer, new, stop.strings)
        )
        out.append({"tokens": new, "logprobs": lps, "stop_reason": "stop" if stopped else "length"})
    result: dict[str, Any] = {"sequences": out}
    if body.get("prompt_logprobs"):  # compute_logprobs: log p(x_t | x_<t); none at t = 0
        n = len(prompt)
        p = Pass(prompt, [0.0] + [1.0] * (n - 1), list(range(n)), [0, n])
        result["prompt_logprobs"] = [None] + session.forward([p]).logprobs[0][1:].tolist()
    return result
