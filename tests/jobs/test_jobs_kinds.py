"""A new kind of job plugs into the scheduler, the worker and the event intake by declaring
itself (:mod:`akka_optimize.jobs.kinds`), without editing any of them.

Real SQLite and the real scheduler; the executor records launches instead of starting a
process, since what is checked is what the scheduler hands a worker (the spec) and how the
events a worker would send land on the run.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from akka_optimize.core.context import ServiceContext
from akka_optimize.db import Database
from akka_optimize.db.migrate import upgrade
from akka_optimize.db.models.jobs import Run, RunAttempt
from akka_optimize.jobs import kinds, states
from akka_optimize.jobs.events import handle_event
from akka_optimize.jobs.kinds import JobKind, Launch, register_kind
from akka_optimize.jobs.records import end_attempt
from akka_optimize.jobs.scheduler import Scheduler
from akka_optimize.jobs.spec import JobSpec
from akka_optimize.jobs.views import metrics, run_view
from akka_optimize.jobs.worker import entry_point
from akka_optimize.settings import Settings
from akka_optimize.store import BlobStore


class RecordingExecutor:
    """Records what it was asked to launch (the Executor protocol of jobs/executor.py)."""

    name = "recording"

    def __init__(self) -> None:
        self.launched: list[tuple[Path, Path, str]] = []

    def launch(self, spec_path: Path, log_path: Path, device: str) -> int:
        self.launched.append((spec_path, log_path, device))
        return 424242

    def alive(self, pid: int) -> bool:
        return True

    def exit_code(self, pid: int) -> int | None:
        return None

    def kill(self, pid: int) -> None:
        pass

    def collect(self) -> None:
        pass


def _eval_spec(launch: Launch) -> JobSpec:
    return launch.spec(dataset={"ref": launch.run.dataset}, extra={"metric": "accuracy"})


def _scored(ctx: Any, session: Any, run: Run, att: RunAttempt, event: dict[str, Any]) -> None:
    run.results = {**(run.results or {}), "accuracy": event["accuracy"]}
    end_attempt(run, att, states.SUCCEEDED)


@pytest.fixture
def ctx(tmp_path: Path) -> ServiceContext:
    settings = Settings(home=tmp_path / "home")
    settings.ensure_dirs()
    upgrade(settings.database_url or "")
    return ServiceContext(
        settings=settings,
        db=Database(settings.database_url or ""),
        store=BlobStore(settings.blobs_url or ""),
        dev_secret=b"",
        base_url="http://127.0.0.1:9999",
    )


@pytest.fixture
def evaluation(monkeypatch: pytest.MonkeyPatch) -> JobKind:
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    return register_kind(
        JobKind(
            name="eval",
            worker="akka_optimize.jobs.training:train",
            build_spec=_eval_spec,
            events={"completed": _scored},
        )
    )


def _queued_run(ctx: ServiceContext, method: str) -> str:
    run_id = uuid.uuid4().hex[:16]
    with ctx.db.session() as s:
        s.add(
            Run(
                id=run_id,
                project="demo",
                method=method,
                state=states.QUEUED,
                plan={},
                resolved={},
                config_hash="0" * 64,
                base_model="tiny/base",
                dataset="demo/questions:v1",
                model_name="demo",
                device_kind="cpu",
                gpus=0,
                results={},
            )
        )
    return run_id


def test_a_registered_kind_is_launched_with_its_spec_and_its_events_land(
    ctx: ServiceContext, evaluation: JobKind, tmp_path: Path
) -> None:
    run_id = _queued_run(ctx, "eval")
    executor = RecordingExecutor()
    with ctx.db.session() as s:
        Scheduler(ctx, executor)._launch(s, s.get(Run, run_id), tmp_path / "weights")

    [(spec_path, _log, device)] = executor.launched
    spec = json.loads(spec_path.read_text())
    assert (spec["kind"], spec["worker"], device) == ("eval", evaluation.worker, "cpu")
    assert spec["dataset"] == {"ref": "demo/questions:v1"}
    assert spec["extra"]["metric"] == "accuracy"
    assert spec["model_dir"] == str(tmp_path / "weights")
    assert spec["callback_url"] == "http://127.0.0.1:9999"

    with ctx.db.session() as s:
        run = s.get(Run, run_id)
        att = s.query(RunAttempt).filter_by(run_id=run_id).one()
        assert (run.state, att.state, att.pid) == (states.PREPARING, states.RUNNING, 424242)
        # a shared event is applied by the intake, the kind's own by its handler
        assert handle_event(ctx, s, run, att, {"type": "metrics", "step": 1, "loss": 0.5}) == {
            "control": None
        }
        handle_event(ctx, s, run, att, {"type": "completed", "accuracy": 0.75})
    with ctx.db.session() as s:
        run = s.get(Run, run_id)
        view = run_view(s, run)
        assert view["state"] == states.SUCCEEDED
        assert run.results["accuracy"] == 0.75
        assert [m["loss"] for m in metrics(s, run)["metrics"]] == [0.5]


def test_a_run_of_an_unregistered_kind_fails_at_launch_with_a_sentence(
    ctx: ServiceContext, tmp_path: Path
) -> None:
    run_id = _queued_run(ctx, "distill")  # a kind no module registers
    executor = RecordingExecutor()
    with ctx.db.session() as s:
        Scheduler(ctx, executor)._launch(s, s.get(Run, run_id), tmp_path / "weights")
    with ctx.db.session() as s:
        run = s.get(Run, run_id)
        assert run.state == states.FAILED
        assert "config.method 'distill'" in run.failure_reason
        assert "no job kind of that name is registered" in run.failure_reason
    assert executor.launched == []


def test_the_worker_runs_the_function_its_spec_names() -> None:
    from akka_optimize.jobs import training

    assert entry_point("akka_optimize.jobs.training:train") is training.train
    with pytest.raises(ValueError, match="names no function"):
        entry_point("akka_optimize.jobs.training:no_such_function")
    with pytest.raises(ValueError, match="names no function"):
        entry_point("akka_optimize.jobs.training")


def test_a_job_kind_names_its_worker_as_module_and_function() -> None:
    with pytest.raises(ValueError, match="not 'module:function'"):
        register_kind(JobKind(name="bad", worker="train", build_spec=_eval_spec))
