"""Post-deploy check: is the served adapter the trained adapter? (behaviours.md 7)

When an endpoint first loads an adapter, greedy answers to a few fixed prompts are
taken three ways: from the endpoint with the adapter, from the trainer's own
sampling with that adapter (:func:`akka_optimize.engine.sampling.generate` at
temperature 0 over plain transformers + PEFT, in a separate process — the service
runs no model), and from the base model. Findings:

- ``served_differs_from_trainer``: a served answer is not the trainer's answer;
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

#: The fixed prompts (user messages) of the check.
CHECK_PROMPTS = (
    "Say hello.",
    "What is 2 + 3?",
    "Name a colour.",
)
#: Greedy tokens generated per prompt.
CHECK_MAX_TOKENS = 16


def _messages(prompt: str, instructions: str | None) -> list[dict[str, str]]:
    msgs = [{"role": "user", "content": prompt}]
    if instructions:
        msgs.insert(0, {"role": "system", "content": instructions})
    return msgs


def trainer_greedy(
    base_dir: Path,
    adapter_dir: Path | None,
    *,
    instructions: str | None = None,
    prompts: tuple[str, ...] = CHECK_PROMPTS,
    max_tokens: int = CHECK_MAX_TOKENS,
) -> dict[str, list[str]]:
    """Greedy answers from the trainer's sampling (plain transformers + PEFT).

    Returns:
        ``{"adapter": [...], "base": [...]}``, one answer per prompt (``adapter``
        empty when ``adapter_dir`` is None).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..engine.sampling import generate
    from .engine import stop_token_ids

    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    stops = stop_token_ids(tok, model.generation_config.to_dict())

    def run(m: Any) -> list[str]:
        out = []
        for p in prompts:
            enc = tok.apply_chat_template(
                _messages(p, instructions),
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )
            new = generate(
                m, tok, list(enc["input_ids"]), max_tokens, temperature=0.0, stop_ids=stops
            )
            out.append(tok.decode([t for t in new if t not in stops], skip_special_tokens=True))
        return out

    result = {"base": run(model), "adapter": []}
    if adapter_dir is not None:
        from peft import PeftModel

        result["adapter"] = run(PeftModel.from_pretrained(model, str(adapter_dir)).eval())
    return result


def compare(served: list[str], trainer: list[str], base: list[str]) -> dict[str, Any]:
    """The endpoint's ``checks`` entry for one adapter.

    Returns:
        ``{"state": "passed"|"failed", "findings": [sentences], "prompts": [{"prompt",
        "served", "trainer", "base"}]}``.
    """
    findings = []
    rows = [
        {"prompt": p, "served": s, "trainer": t, "base": b}
        for p, s, t, b in zip(CHECK_PROMPTS, served, trainer, base, strict=False)
    ]
    differs = [r["prompt"] for r in rows if r["served"] != r["trainer"]]
    if differs:
        findings.append(
            f"served_differs_from_trainer: the endpoint's greedy answer differs from the "
            f"trainer's own sampling with this adapter for {len(differs)} of {len(rows)} "
            f"prompts ({differs[0]!r}, …); the served adapter may not be the trained one."
        )
    if rows and all(r["trainer"] == r["base"] for r in rows):
        findings.append(
            "adapter_changes_nothing: with this adapter every greedy answer equals the base "
            "model's; the adapter may be untrained or empty."
        )
    return {"state": "failed" if findings else "passed", "findings": findings, "prompts": rows}


def main(argv: list[str] | None = None) -> int:
    """``--spec FILE`` with ``{"baseDir", "adapterDir", "instructions"}``; prints JSON."""
    ap = argparse.ArgumentParser(prog="python -m akka_optimize.serving.check")
    ap.add_argument("--spec", required=True, type=Path)
    args = ap.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    res = trainer_greedy(
        Path(spec["baseDir"]),
        Path(spec["adapterDir"]) if spec.get("adapterDir") else None,
        instructions=spec.get("instructions"),
    )
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
