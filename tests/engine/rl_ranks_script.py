"""Run a reinforcement run on every rank of ``torch.distributed.run`` (not a test module).

``python -m torch.distributed.run --standalone --nproc-per-node N rl_ranks_script.py MODEL
OUT`` runs :func:`run_rl` with :data:`SETTINGS` over :data:`PROMPTS` on every rank; rank 0
writes ``OUT/result.json`` with its events and the final adapter tensors. The test
(test_engine_rl_ranks.py) runs the same on one device.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine_testkit import fp32_config
from safetensors.torch import load_file

from akka_optimize.engine.distributed import exit_rank, finish_ranks, world
from akka_optimize.engine.rl.loop import RLPrompt, RLSettings, run_rl
from akka_optimize.engine.snapshots import state_path

PROMPTS = [
    RLPrompt([1, 2045, 314, 1930, 28, 17, 1789, 5]),
    RLPrompt([1, 45, 14, 190, 28]),
    RLPrompt([1, 300, 301, 302, 303, 304]),
    RLPrompt([1, 77, 78]),
]
SETTINGS = RLSettings(
    samples_per_prompt=4,
    max_new_tokens=4,
    seed=11,
    loss_fn="ppo",
    aggregation="sequence_mean",  # its counts are the whole update's, over the ranks
    group_generators=True,
)
# A small rate: Adam turns a rounding difference in a near-zero gradient into a step of up
# to the rate (tests/engine/test_engine_ranks.py).
CONFIG = dict(learning_rate=1e-4, seed=3)
STEPS, PER_STEP = 3, 3  # 3 groups: rank 0 trains groups 0 and 2, rank 1 group 1


def score(_prompts, samples) -> None:
    """A reward of the tokens alone, the same on any rank."""
    for s in samples:
        s.reward = sum(s.tokens) % 5 / 5


def run(model_dir: str, out: Path, **config) -> dict:
    """One run; returns its metrics events and final adapter (as lists)."""
    events: list[dict] = []
    result = run_rl(
        fp32_config(**CONFIG, **config), SETTINGS, Path(model_dir), PROMPTS, steps=STEPS,
        prompts_per_step=PER_STEP, score=score, stop_ids=set(), state_dir=out / "state",
        emit=events.append,
    )  # fmt: skip
    if world()[0] != 0:  # rank 0 alone writes the save
        return {}
    folder = state_path(out / "state", result.step) / "state"
    adapter = load_file(folder / "adapter_state.safetensors")
    return {
        "metrics": [e for e in events if e["type"] == "metrics"],
        "samples": [e for e in events if e["type"] == "samples"],
        "adapter": {k: v.flatten().tolist() for k, v in adapter.items()},
    }


def main(model_dir: str, out: str) -> None:
    got = run(model_dir, Path(out), ranks=2, sharding="none")
    if world()[0] == 0:
        (Path(out) / "result.json").write_text(json.dumps(got))
    finish_ranks()


if __name__ == "__main__":
    main(*sys.argv[1:])
    exit_rank(0)
