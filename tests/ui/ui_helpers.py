"""What the dashboard tests share: the fixture's record and the plan of its run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from helpers import LiveService

TINY = "akka-optimize/tiny-smollm2"


@dataclass
class Dashboard:
    """The live service and what the fixture made on it."""

    svc: LiveService
    source: dict
    branch: dict
    endpoint: dict
    tmp: Path
    rl: dict = field(default_factory=dict)
    evaluations: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def cli_json(self, *args: str) -> dict:
        out = self.svc.cli(*args, "-o", "json", check=True).stdout
        return json.loads(out[out.index("{") :])


def plan_file(path: Path) -> Path:
    """One epoch over 8 rows (4 updates), validation every 2 updates, a save every 2."""
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": TINY,
        "config": {
            "dataset": "demo/train",
            "method": "sft",
            "maxSeqLength": 512,
            "data": {"validationDataset": "demo/val"},
            "hyperparams": {
                "training": {
                    "epochs": 1,
                    "microBatchPerGpu": 2,
                    "seed": 7,
                    "validationFrequencySteps": 2,
                },
                "optimizer": {"learningRate": 0.001},
            },
        },
        "execution": {"saveEverySteps": 2, "keepRecoverable": 2},
    }
    path.write_text(json.dumps(plan))
    return path
