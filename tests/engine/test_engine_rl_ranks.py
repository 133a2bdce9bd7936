"""A reinforcement run on two gloo ranks equals one device over the same prompts (issue 52
item 1; seeds/004 §1.3 G; DATA-AND-TRAINING-RULES.md rules 17–18): groups dealt whole,
group i to rank i mod world, the aggregation's counts and the metrics over both ranks,
gradients combined once per update, one adapter saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rl_ranks_script import run

from akka_optimize.engine.rl.ranks import rank_groups

HERE = Path(__file__).parent


def test_groups_are_dealt_whole_round_robin() -> None:
    """seeds/004 §1.3 G's AT: 10 groups × G = 4 on 4 ranks: ranks 0 and 1 get 12
    completions, ranks 2 and 3 get 8; no group is on two ranks."""
    shares = [rank_groups(10, r, 4) for r in range(4)]
    assert shares == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert [len(s) * 4 for s in shares] == [12, 12, 8, 8]
    assert sorted(g for s in shares for g in s) == list(range(10))
    with pytest.raises(ValueError, match="does not exist"):
        rank_groups(10, 4, 4)


def test_two_ranks_equal_one_device(tiny_model_dir, tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    proc = subprocess.run(
        [*cmd, str(HERE / "rl_ranks_script.py"), str(tiny_model_dir), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    two = json.loads((tmp_path / "result.json").read_text())
    one = run(str(tiny_model_dir), tmp_path / "one")
    assert len(two["metrics"]) == len(one["metrics"]) == 3
    for a, b in zip(two["metrics"], one["metrics"], strict=True):
        assert not b["skipped"]
        for key in ("rewardMean", "rewardStd", "rewardMax", "completionLength",
                    "supervisedTokens", "groupsLeftOut"):  # fmt: skip
            assert a[key] == pytest.approx(b[key], abs=1e-9), key  # the same samples
        assert a["logprobDiffMax"] == pytest.approx(b["logprobDiffMax"], abs=1e-5)
        for key in ("loss", "gradNorm", "adapterNorm", "updateRatio"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    # rank 0 shows its own groups (0 and 2) under their update-wide indices
    assert {s["group"] for s in two["samples"][0]["samples"]} == {0, 2}
    assert set(two["adapter"]) == set(one["adapter"])
    for name, values in one["adapter"].items():
        assert two["adapter"][name] == pytest.approx(values, rel=0, abs=1e-5), name
