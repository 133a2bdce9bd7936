"""Post-deploy check: is the served adapter the trained adapter? (behaviours.md 7)

When an endpoint first loads an adapter, greedy answers to a few fixed prompts are
taken three ways: from the endpoint with the adapter, from the trainer's own
sampling with that adapter (:func:`akka_optimize.engine.sampling.generate` at
temperature 0 over plain transformers + PEFT, in a separate process — the service
runs no model), and from the base model. Findings:

- ``served_differs_from_trainer``: a served answer is not the trainer's answer, and
  is not a greedy answer of the trainer's model up to float rounding either: fed
  through the trainer's model, some served token's log-probability falls more than
  :data:`TIE_NATS` below that position's best. (An endpoint that merges the adapter
  into the weights, or computes in bf16, rounds differently from the trainer and may
  break a near-tie the other way; that is not a different adapter.) An endpoint that
  serves in bf16 (``serving.precision: bf16``) is compared with the trainer's sampling
  over bf16 base weights (the adapter fp32, as a bf16 training run holds it), and a
  near-tie there spans :data:`TIE_NATS_BF16`.
- ``adapter_changes_nothing``: with the adapter, every answer equals the base
  model's.

Run the trainer side as ``python -m akka_optimize.serving.check --spec FILE``
(prints JSON); :func:`compare` turns both sides into the endpoint's ``checks``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..engine.check_prompts import CHECK_MAX_TOKENS, CHECK_PROMPTS, check_prompt_ids, stop_token_ids
from ..lazy_imports import transformers_names

#: How far (nats) below the trainer's best token a served token may be and still count
#: as the same greedy choice broken by rounding.
TIE_NATS = 0.05
#: The same for an endpoint serving in bf16: merging an adapter into bf16 weights rounds
#: each weight to 8 significant bits, which moves logits by a few hundredths of a nat.
TIE_NATS_BF16 = 0.25


def trainer_greedy(
    base_dir: Path,
    adapter_dir: Path | None,
    *,
    instructions: str | None = None,
    prompts: tuple[str, ...] = CHECK_PROMPTS,
    max_tokens: int = CHECK_MAX_TOKENS,
    precision: str = "fp32",
    served: list[str] | None = None,
) -> dict[str, Any]:
    """Greedy answers from the trainer's sampling (plain transformers + PEFT).

    Args:
        served: the endpoint's answers to ``prompts``; for each one that differs from
            the trainer's, its largest shortfall is measured (see :func:`shortfall`).
        precision: the endpoint's ``serving.precision``: ``bf16`` loads the base
            weights in bf16, anything else in fp32 (the check runs on the CPU, where
            ``auto`` serves fp32).

    Returns:
        ``{"adapter": [...], "base": [...], "shortfall": [...]}``, one entry per prompt
        (``adapter`` empty when ``adapter_dir`` is None; ``shortfall`` holds a float in
        nats for a served answer that differs, else None).
    """
    import torch

    AutoModelForCausalLM, AutoTokenizer = transformers_names(  # noqa: N806 (class names)
        "AutoModelForCausalLM", "AutoTokenizer"
    )

    from ..engine.sampling import check_answers  # lazy: torch

    tok = AutoTokenizer.from_pretrained(base_dir)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype).eval()
    stops = stop_token_ids(tok, model.generation_config.to_dict())

    def run(m: Any) -> list[str]:
        return check_answers(
            m, tok, stops, instructions=instructions, prompts=prompts, max_tokens=max_tokens
        )

    result: dict[str, Any] = {"base": run(model), "adapter": [], "shortfall": []}
    if adapter_dir is not None:
        from peft import PeftModel

        adapted = PeftModel.from_pretrained(model, str(adapter_dir)).eval()
        result["adapter"] = run(adapted)
        for p, mine, theirs in zip(prompts, result["adapter"], served or [], strict=False):
            prompt = check_prompt_ids(tok, p, instructions)
            result["shortfall"].append(
                None if mine == theirs else shortfall(adapted, tok, prompt, theirs)
            )
    return result


def shortfall(model: Any, tokenizer: Any, prompt_ids: list[int], answer: str) -> float:
    """The largest gap (nats) between the model's best next token and ``answer``'s token,
    over the tokens of ``answer`` fed after ``prompt_ids``; 0.0 when every token of
    ``answer`` is the model's greedy choice. float32 log-probabilities.
    """
    import torch

    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if not ids:
        return 0.0
    full = torch.tensor([prompt_ids + ids])
    with torch.no_grad():
        logits = model(input_ids=full).logits[0, len(prompt_ids) - 1 : -1].float()
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp.gather(1, torch.tensor(ids)[:, None]).squeeze(1)
    return float((lp.max(dim=-1).values - chosen).max())


def compare(
    served: list[str],
    trainer: list[str],
    base: list[str],
    shortfalls: list[float | None] | None = None,
    precision: str = "fp32",
) -> dict[str, Any]:
    """The endpoint's ``checks`` entry for one adapter.

    Args:
        shortfalls: per prompt, :func:`shortfall` of a served answer that differs from
            the trainer's (None or missing: not measured, so any difference counts).
        precision: the endpoint's ``serving.precision`` (``bf16``: a near-tie spans
            :data:`TIE_NATS_BF16`, else :data:`TIE_NATS`).

    Returns:
        ``{"state": "passed"|"failed", "findings": [sentences], "prompts": [{"prompt",
        "served", "trainer", "base", "shortfall"}]}``.
    """
    findings = []
    tie = TIE_NATS_BF16 if precision == "bf16" else TIE_NATS
    gaps = list(shortfalls or [])
    rows = [
        {
            "prompt": p,
            "served": s,
            "trainer": t,
            "base": b,
            "shortfall": gaps[i] if i < len(gaps) else None,
        }
        for i, (p, s, t, b) in enumerate(zip(CHECK_PROMPTS, served, trainer, base, strict=False))
    ]
    differs = [
        r["prompt"]
        for r in rows
        if r["served"] != r["trainer"] and (r["shortfall"] is None or r["shortfall"] > tie)
    ]
    if differs:
        worst = max((r["shortfall"] or 0.0) for r in rows if r["prompt"] in differs)
        why = f" (a served token {worst:.3g} nats below the trainer's best)" if worst else ""
        findings.append(
            f"served_differs_from_trainer: the endpoint's greedy answer differs from the "
            f"trainer's own sampling with this adapter for {len(differs)} of {len(rows)} "
            f"prompts ({differs[0]!r}, …){why}; the served adapter may not be the trained one."
        )
    if rows and all(r["trainer"] == r["base"] for r in rows):
        findings.append(
            "adapter_changes_nothing: with this adapter every greedy answer equals the base "
            "model's; the adapter may be untrained or empty."
        )
    return {"state": "failed" if findings else "passed", "findings": findings, "prompts": rows}


def main(argv: list[str] | None = None) -> int:
    """``--spec FILE`` with ``{"baseDir", "adapterDir", "instructions", "served",
    "precision"}``; prints JSON."""
    ap = argparse.ArgumentParser(prog="python -m akka_optimize.serving.check")
    ap.add_argument("--spec", required=True, type=Path)
    args = ap.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    res = trainer_greedy(
        Path(spec["baseDir"]),
        Path(spec["adapterDir"]) if spec.get("adapterDir") else None,
        instructions=spec.get("instructions"),
        served=spec.get("served"),
        precision=str(spec.get("precision", "fp32")),
    )
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
