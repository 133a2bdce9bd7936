"""Run a preference run on every rank of ``torch.distributed.run`` (not a test module).

``python -m torch.distributed.run --standalone --nproc-per-node N dpo_ranks_script.py MODEL
OUT.json CONFIG.json`` trains the toy pairs of tests/engine/test_engine_dpo.py with
:func:`run_dpo` under CONFIG (``fp32_config`` keyword arguments) on every rank; rank 0
writes OUT.json with its ``metrics`` events and the final adapter tensors as lists.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from engine_testkit import fp32_config
from test_engine_dpo import toy_pairs

from akka_optimize.engine.distributed import exit_rank, finish_ranks, world
from akka_optimize.engine.dpo.loop import run_dpo
from akka_optimize.engine.dpo.loss import DpoSettings


def main() -> None:
    model, out, config = sys.argv[1], Path(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text())
    events: list[dict] = []
    state = Path(tempfile.mkdtemp())
    res = run_dpo(
        fp32_config(**config), DpoSettings(0.1), Path(model), toy_pairs(8, 4), None, state,
        events.append,
    )  # fmt: skip
    rank, _ = world()
    if rank == 0:
        from safetensors.torch import load_file

        adapter = load_file(str(res.adapter_dir / "adapter_model.safetensors"))
        out.write_text(
            json.dumps(
                {
                    "metrics": [e for e in events if e["type"] == "metrics"],
                    "adapter": {k: v.flatten().tolist() for k, v in adapter.items()},
                }
            )
        )
    finish_ranks()


if __name__ == "__main__":
    main()
    exit_rank(0)
