"""Tinker datums → the engine's passes, with every check a datum must pass first.

A Tinker datum is already shifted (seeds/004, DESIGN.md "The engine's seam"):
``model_input`` tokens x₀…x_{N−1}, ``loss_fn_inputs.target_tokens`` x₁…x_N, and ``weights``
(and, for the reinforcement losses, the sampler's ``logprobs`` and ``advantages``) aligned
to the targets. The engine scores ``input_ids[t+1]`` from position t, so a datum becomes one
pass ``x₀…x_N`` whose every target position is scored; the weights travel as a loss input,
so a weight of 0 still returns that token's log-prob (as Tinker does) and adds nothing to
the loss.

Every datum of a call is checked before anything runs, so a refused call trains nothing.
"""

from __future__ import annotations

import math
from typing import Any

from ..data.types import Pass

LOSS_INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
    "gspo": ("target_tokens", "logprobs", "advantages", "sequence_ratio_mask"),
}
"""The ``loss_fn_inputs`` each loss reads (``weights`` defaults to 1 for cross_entropy)."""
LOSS_CONFIG = {
    "cross_entropy": (),
    "importance_sampling": (),
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
    "dro": ("beta",),
    "gspo": ("clip_low_threshold", "clip_high_threshold"),
}
"""The ``loss_fn_config`` keys each loss takes (the engine's loss parameters)."""


REFUSED_LOSSES = {
    "stable_reinforce": (
        "its objective is not published (the SDK and Tinker's docs, alpha, name only its "
        "kl_coeff and the stability information recorded at sampling), so the platform "
        "cannot compute it as Tinker does"
    ),
    "custom": (
        "server-side custom losses (create_custom_loss) are not served; "
        "forward_backward_custom runs the loss in the client and works"
    ),
}
"""The SDK 0.38 ``LossFnType`` names the platform refuses, and why (issue 53 break 6).
The tinker-cookbook's RL recipes default to ``stable_reinforce``: give them
``loss_fn=importance_sampling`` (or ``ppo``, ``cispo``, ``gspo``) on their command line."""


class DatumError(ValueError):
    """A datum the engine cannot train on; the text names the field."""


def check_loss(loss_fn: str, config: dict[str, float]) -> None:
    """Refuse an unknown ``loss_fn`` or a ``loss_fn_config`` key it does not take.

    Raises:
        DatumError: naming ``loss_fn`` or ``loss_fn_config.KEY``.
    """
    if loss_fn not in LOSS_INPUTS:
        why = f" ({REFUSED_LOSSES[loss_fn]})" if loss_fn in REFUSED_LOSSES else ""
        raise DatumError(
            f"loss_fn {loss_fn!r} is not one the platform trains with{why}; use one of "
            f"{', '.join(sorted(LOSS_INPUTS))}."
        )
    for key, value in config.items():
        if key not in LOSS_CONFIG[loss_fn]:
            allowed = ", ".join(LOSS_CONFIG[loss_fn]) or "none"
            raise DatumError(
                f"loss_fn_config.{key} is not a parameter of {loss_fn} (it takes: {allowed})."
            )
        if not math.isfinite(value):
            raise DatumError(f"loss_fn_config.{key} is {value}; give a finite number.")


def _floats(values: list[Any], where: str, n: int) -> list[float]:
    if len(values) != n:
        raise DatumError(
            f"{where} has {len(values)} values but model_input has {n} tokens; give one "
            "per target token."
        )
    out = [float(v) for v in values]
    bad = next((i for i, v in enumerate(out) if not math.isfinite(v)), None)
    if bad is not None:
        raise DatumError(f"{where}[{bad}] is {out[bad]}; every value must be a finite number.")
    return out


def _datum(d: dict[str, Any], i: int, loss_fn: str, vocab: int) -> tuple[Pass, dict]:
    tokens = [int(t) for t in d["tokens"]]
    inputs = d["inputs"]
    n = len(tokens)
    if n == 0:
        raise DatumError(f"data[{i}].model_input has no tokens.")
    where = f"data[{i}].loss_fn_inputs"
    for key in LOSS_INPUTS[loss_fn]:
        if key not in inputs and key != "weights":
            raise DatumError(f"{where}.{key} is missing; {loss_fn} needs it.")
    unknown = sorted(set(inputs) - set(LOSS_INPUTS[loss_fn]))
    if unknown:
        raise DatumError(f"{where}.{unknown[0]} is not an input of {loss_fn}.")
    targets = [int(t) for t in _floats(inputs["target_tokens"], f"{where}.target_tokens", n)]
    for name, ids in (("model_input", tokens), (f"{where}.target_tokens", targets)):
        bad = next((j for j, t in enumerate(ids) if not 0 <= t < vocab), None)
        if bad is not None:
            raise DatumError(
                f"data[{i}].{name.removeprefix(f'data[{i}].')}[{bad}] is token {ids[bad]}, "
                f"outside the model's vocabulary (0..{vocab - 1})."
            )
    if targets[:-1] != tokens[1:]:
        j = next(j for j in range(n - 1) if targets[j] != tokens[j + 1])
        raise DatumError(
            f"{where}.target_tokens[{j}] is {targets[j]} but model_input[{j + 1}] is "
            f"{tokens[j + 1]}; the platform trains next-token targets (target_tokens = "
            "model_input shifted by one)."
        )
    ids = tokens + [targets[-1]]
    p = Pass(ids, [0.0] + [1.0] * n, list(range(n + 1)), [0, n + 1], [i])
    weights = inputs.get("weights")
    loss_in = {
        "weights": [0.0] + (_floats(weights, f"{where}.weights", n) if weights else [1.0] * n)
    }
    if loss_fn != "cross_entropy":
        loss_in["weights"] = [0.0] + [1.0] * n
        loss_in["sampling_logprobs"] = [0.0] + _floats(inputs["logprobs"], f"{where}.logprobs", n)
        loss_in["advantages"] = [0.0] + _floats(inputs["advantages"], f"{where}.advantages", n)
    if loss_fn == "gspo":
        mask = _floats(inputs["sequence_ratio_mask"], f"{where}.sequence_ratio_mask", n)
        if not any(mask):
            raise DatumError(
                f"{where}.sequence_ratio_mask marks no token; gspo's sequence ratio is a mean "
                "over the tokens it marks (the sampled ones)."
            )
        loss_in["sequence_ratio_mask"] = [0.0] + mask
    return p, loss_in


ADAM_DEFAULTS = {
    "learning_rate": 1e-4,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-12,
    "weight_decay": 0.0,
    "grad_clip_norm": 0.0,
}
"""tinker 0.38 ``AdamParams`` defaults, used for a field the client leaves out."""
ADAM_RANGES = {
    "learning_rate": "a finite number ≥ 0",
    "beta1": "a number from 0 up to (not including) 1",
    "beta2": "a number from 0 up to (not including) 1",
    "eps": "a finite number ≥ 1.2e-38 (float32's smallest normal number: a smaller one "
    "rounds to 0 in the float32 update, which then divides 0 by 0)",
    "weight_decay": "a finite number ≥ 0",
    "grad_clip_norm": "a finite number ≥ 0 (0: no clipping)",
}
"""What each ``adam_params`` field must be (AdamW, Loshchilov & Hutter 2019: β < 1 keeps
the moments' bias correction finite, ε > 0 keeps the update's division finite; the update
computes in float32, so ε must stay above 0 there: :data:`EPS_MIN`)."""

EPS_MIN = 1.1754943508222875e-38
"""float32's smallest normal number (``torch.finfo(torch.float32).tiny``): the least ``eps``
the float32 AdamW update keeps above 0."""


def adam_params(given: Any) -> dict[str, float]:
    """``optim_step``'s ``adam_params`` with defaults (:data:`ADAM_DEFAULTS`) filled in.

    Raises:
        DatumError: naming ``adam_params`` (not an object) or ``adam_params.KEY`` (unknown,
            not a number, or outside :data:`ADAM_RANGES`).
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise DatumError(f"adam_params is {given!r}; give an AdamParams object.")
    unknown = sorted(set(given) - set(ADAM_DEFAULTS))
    if unknown:
        raise DatumError(f"adam_params.{unknown[0]} is not an AdamParams field.")
    params = dict(ADAM_DEFAULTS)
    for key, value in given.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        v = float(value) if ok else math.nan
        if key.startswith("beta"):
            ok = ok and 0 <= v < 1
        elif key == "eps":
            ok = ok and math.isfinite(v) and v >= EPS_MIN
        else:
            ok = ok and math.isfinite(v) and v >= 0
        if not ok:
            shown = repr(value)[:40]
            raise DatumError(f"adam_params.{key} is {shown}; give {ADAM_RANGES[key]}.")
        params[key] = v
    return params


def non_finite_config(config: dict[str, float]) -> str | None:
    """The sentence for the first NaN or infinite ``loss_fn_config`` value, or None
    (checked where the request is decoded, as :func:`non_finite`)."""
    for key, value in config.items():
        if not math.isfinite(value):
            return f"loss_fn_config.{key} is {value}; give a finite number."
    return None


def non_finite(data: list[dict[str, Any]]) -> str | None:
    """The sentence for the first NaN or infinite value in the datums' inputs, or None
    (checked where the request is decoded: the JSON that carries it on cannot hold NaN)."""
    for i, d in enumerate(data):
        for name, values in d["inputs"].items():
            bad = next((j for j, v in enumerate(values) if not math.isfinite(v)), None)
            if bad is not None:
                return (
                    f"data[{i}].loss_fn_inputs.{name}[{bad}] is {values[bad]}; every value "
                    "must be a finite number."
                )
    return None


def to_passes(
    data: list[dict[str, Any]], loss_fn: str, config: dict[str, float], vocab: int
) -> tuple[list[Pass], list[dict[str, list[float]]]]:
    """One pass and its loss inputs per datum (as :mod:`akka_optimize.tinker.wire` decodes
    them: ``{"tokens", "inputs"}``).

    Raises:
        DatumError: the first problem found, naming the datum and field: an unknown loss
            or loss parameter, a missing or extra input, a length other than model_input's,
            a non-finite value, a token outside ``0..vocab-1``, targets that are not the
            inputs shifted by one.
    """
    check_loss(loss_fn, config)
    if not data:
        raise DatumError("data is empty; give at least one datum.")
    out = [_datum(d, i, loss_fn, vocab) for i, d in enumerate(data)]
    return [p for p, _ in out], [li for _, li in out]
