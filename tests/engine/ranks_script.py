"""Run supervised scenarios on every rank of ``torch.distributed.run`` (not a test module).

``python -m torch.distributed.run --standalone --nproc-per-node N ranks_script.py MODEL PLAN``
reads PLAN (JSON: a list of scenarios ``{name, rows, rows_seed, config, state_dir,
stop_after_step, resume_step, validation_rows, init_adapter, model_dir, vocab}``: MODEL
unless the scenario names its own ``model_dir``), runs :func:`run_sft` for
each on every rank, and rank 0 writes ``<name>.json`` next to PLAN with its events, checks
and the final adapter tensors, or with the sentence of the EngineError every rank raised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine_testkit import fp32_config, random_rows
from safetensors.torch import load_file

from akka_optimize.engine.distributed import exit_rank, finish_ranks, world
from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.sft import SftResult, run_sft, state_path


def _run(model_dir: str, sc: dict, events: list[dict]) -> SftResult:
    vocab = sc.get("vocab", 2000)
    return run_sft(
        fp32_config(**sc["config"]),
        Path(sc.get("model_dir") or model_dir),
        random_rows(sc["rows"], seed=sc["rows_seed"], vocab=vocab),
        random_rows(sc["validation_rows"], seed=99, vocab=vocab)
        if sc.get("validation_rows")
        else None,
        Path(sc["state_dir"]),
        events.append,
        stop_after_step=sc.get("stop_after_step"),
        resume_step=sc.get("resume_step"),
        init_adapter=Path(sc["init_adapter"]) if sc.get("init_adapter") else None,
    )


def _record(sc: dict, events: list[dict], result: SftResult) -> dict:
    folder = state_path(Path(sc["state_dir"]), result.step)
    adapter = load_file(folder / "state" / "adapter_state.safetensors")
    return {
        "events": events,
        "step": result.step,
        "checks": result.checks,
        "adapter": {k: v.flatten().tolist() for k, v in adapter.items()},
    }


def main(model_dir: str, plan_path: str) -> None:
    plan = Path(plan_path)
    for sc in json.loads(plan.read_text()):
        events: list[dict] = []
        try:
            result = _run(model_dir, sc, events)
        except EngineError as exc:  # every rank fails alike; rank 0 records the sentence
            result, out = None, {"failure": exc.message, "field": exc.field, "events": events}
        if world()[0] == 0:  # rank 0 alone wrote the saves
            out = _record(sc, events, result) if result is not None else out
            (plan.parent / f"{sc['name']}.json").write_text(json.dumps(out))
    finish_ranks()


if __name__ == "__main__":
    main(*sys.argv[1:])
    exit_rank(0)  # as the service's worker: no interpreter teardown after the group
