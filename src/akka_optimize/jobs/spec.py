"""The job spec: everything a worker needs for one attempt, as JSON.

The service writes it when it launches an attempt (DESIGN.md "Where a run
executes"): the resolved settings, pinned artifact locations, the callback
address and the attempt's token. The worker needs no database.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobSpec:
    """One attempt of one run.

    Attributes:
        run_id / attempt: which run and attempt (1-based).
        callback_url: the service's base URL for events.
        token: bearer token of this attempt (stored hashed by the service).
        blobs_url: the blob store's fsspec URL (saves are written there).
        model_dir: local folder of the base model's weights (the shared cache).
        dataset / validation_dataset: registry records (``pinned`` and ``metadata``).
        engine: engine settings (``akka_optimize.engine.config.EngineConfig`` fields); this
            and the fields below up to ``warm_start`` are what a supervised run fills.
        loss: loss policy (``assistantTurns``, ``trainOnToolCalls``, ``trainOnToolResults``).
        max_seq_length: longest conversation in tokens; longer rows are dropped and counted.
        on_too_long: ``drop`` or ``refuse``.
        state_prefix: blob prefix for this run's saves.
        resume_step / resume_state_key: where an attempt that resumes starts.
        branch_origin: the state to resume is the branch's origin (another run's state,
            continued under this run's settings; :mod:`akka_optimize.jobs.branches`).
        warm_start: registry record (``ref``, ``digest``, ``files``) of the adapter the
            run's weights start from (``warmStartModelId``), or None.
        device: ``cpu`` or ``cuda``.
        kind / worker: the job kind (the run's ``method``) and the ``"module:function"`` the
            worker process runs for it (:mod:`akka_optimize.jobs.kinds`).
        extra: what a kind needs beyond these fields; ``work_dir`` is the attempt's scratch.
    """

    run_id: str
    attempt: int
    callback_url: str
    token: str
    blobs_url: str
    model_dir: str
    dataset: dict[str, Any]
    state_prefix: str
    engine: dict[str, Any] = field(default_factory=dict)
    loss: dict[str, Any] = field(default_factory=dict)
    max_seq_length: int = 2048
    validation_dataset: dict[str, Any] | None = None
    on_too_long: str = "drop"
    resume_step: int | None = None
    resume_state_key: str | None = None
    branch_origin: bool = False
    warm_start: dict[str, Any] | None = None
    device: str = "cpu"
    kind: str = "sft"
    worker: str = "akka_optimize.jobs.training:train"
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path) -> Path:
        """Write the spec as JSON (mode 0600: it holds a token)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))
        path.chmod(0o600)
        return path

    @classmethod
    def read(cls, path: Path) -> JobSpec:
        """Read a spec written by :meth:`write`."""
        return cls(**json.loads(Path(path).read_text()))


def worker_command(spec_path: Path, python: str | None = None) -> list[str]:
    """The command that runs the attempt of the spec at ``spec_path`` (what every executor
    starts; DESIGN.md "Where a run executes"): ``python -m akka_optimize.jobs.worker SPEC``,
    or, for a run on several devices (``engine.ranks`` N > 1, from ``execution.gpus``), the
    same worker under ``python -m torch.distributed.run --standalone --nproc-per-node N`` on
    one node, each rank one device (NCCL on CUDA, gloo on CPU; the engine joins the group).
    """
    import sys

    exe = python or sys.executable
    ranks = spec_ranks(spec_path)
    worker = ["-m", "akka_optimize.jobs.worker", str(spec_path)]
    if ranks <= 1:
        return [exe, *worker]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    return [exe, *launcher, *worker]


def spec_ranks(spec_path: Path) -> int:
    """The ranks the attempt of the spec at ``spec_path`` trains on (``engine.ranks``, 1
    when unset: one device; 1 too for a spec that cannot be read, whose worker then fails
    with its own sentence)."""
    try:
        spec = json.loads(Path(spec_path).read_text())
    except (OSError, ValueError):
        return 1
    return int((spec.get("engine") or {}).get("ranks", 1))
