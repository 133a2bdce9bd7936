"""Evaluation benchmark: examples/s of an evaluation's answer-and-grade path against a
plain sequential ``generate`` + score loop over the same rows (issue 17 "Checks": goal ≥ 3×
on 2 CPU cores through batching).

The evaluation side is what the ``eval`` worker runs (:mod:`akka_optimize.evals.worker`):
every prompt through the serving engine's batching (``answer_all``, 16 in flight), then
the GSM8K bundle's ``compute_score`` in the sandboxed grader pool
(:mod:`akka_optimize.evals.sandbox.pool`). The baseline is what a user writes by hand:
``model.generate`` one prompt at a time, then the same function called in-process. Both
are greedy and generate exactly ``tokens`` tokens per answer (stops cleared), on the tiny
test model (quick) or SmolLM2-135M, over GSM8K test questions.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _rows(n: int) -> list[dict[str, Any]]:
    items = [json.loads(x) for x in (REPO / "data/gsm8k/test.jsonl").open()][:n]
    return [
        {
            "messages": [
                {"role": "user", "content": it["question"]},
                {"role": "assistant", "content": it["answer"]},
            ]
        }
        for it in items
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    """Examples/s, evaluation path vs sequential generate + score, on one model."""
    import torch

    from akka_optimize.evals.rows import eval_rows
    from akka_optimize.evals.sandbox.pool import GraderPool, Limits
    from akka_optimize.evals.worker import answer_all, prompt_ids
    from akka_optimize.serving.engine import SamplingParams
    from akka_optimize.serving.transformers_engine import TransformersEngine

    from .serving import _model_dir

    n, tokens = (16, 24) if quick else (32, 64)
    bundle = REPO / "examples/gsm8k/scoring"
    with tempfile.TemporaryDirectory() as tmp:
        base = _model_dir(Path(tmp), quick)
        rows = eval_rows(_rows(n), "gsm8k/test:v1", "gsm8k/test")
        engine = TransformersEngine(base, max_context=2048, max_batch_rows=16)
        engine.stop_ids = set()
        params = SamplingParams(max_tokens=tokens, temperature=0.0)

        def evaluation() -> float:
            t0 = time.perf_counter()
            answers = answer_all(
                engine, rows, None, params, concurrency=16, on_answer=lambda _n: None,
                stop=lambda: False,
            )  # fmt: skip
            calls = [
                {"data_source": r.data_source, "solution_str": a or "",
                 "ground_truth": r.ground_truth, "extra_info": r.extra_info}
                for r, a in zip(rows, answers, strict=True)
            ]  # fmt: skip
            with GraderPool(bundle, "reward", "compute_score", Limits()) as pool:
                graded = pool.score(calls)
            assert all(g.error is None for g in graded), [g.error for g in graded]
            return time.perf_counter() - t0

        spec = importlib.util.spec_from_file_location("gsm8k_reward", bundle / "reward.py")
        assert spec and spec.loader
        reward = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reward)
        model, tok = engine.model, engine.tokenizer

        def sequential() -> float:
            t0 = time.perf_counter()
            for r in rows:
                ids = torch.tensor([prompt_ids(tok, r)], device=engine.device)
                with torch.no_grad():
                    out = model.generate(
                        ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                        pad_token_id=tok.eos_token_id,
                    )  # fmt: skip
                text = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
                reward.compute_score(r.data_source, text, r.ground_truth, r.extra_info)
            return time.perf_counter() - t0

        answer_all(
            engine,
            rows[:2],
            None,
            params,
            concurrency=2,
            on_answer=lambda _n: None,
            stop=lambda: False,
        )  # fmt: skip  (warm-up)
        ev_s = min(evaluation() for _ in range(2))
        seq_s = min(sequential() for _ in range(2))
    return [
        {
            "name": "evaluation_examples_per_s",
            "value": round(n / ev_s, 2),
            "unit": "examples/s",
            "baseline": round(n / seq_s, 2),
            "ratio": round(seq_s / ev_s, 3),
            "goal": "ratio >= 3 on 2 CPU cores (baseline: sequential generate + score)",
            "detail": f"{n} GSM8K questions, {tokens} tokens each, greedy; grading in the sandbox",
        }
    ]


if __name__ == "__main__":
    import sys

    print(json.dumps(run("--full" not in sys.argv), indent=2))
