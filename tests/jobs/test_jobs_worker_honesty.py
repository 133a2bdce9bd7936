"""What a training worker reports while it prepares and saves (issue 16 item 9): PREPARING
counts completed and total rows and a cancel stops tokenizing (F071); a save the blob store
refuses is named by step and the run goes on (F074)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_optimize.data.masks import prepare_examples
from akka_optimize.data.policy import LossPolicy
from akka_optimize.db.models.jobs import Run, RunAttempt
from akka_optimize.jobs.events import apply_event
from akka_optimize.jobs.spec import JobSpec
from akka_optimize.jobs.training import CancelledWhileTokenizing, tokenizing_progress, uploading
from akka_optimize.store import BlobStore


class Events:
    """The worker's event client as the service would answer it: every send is kept, and
    the answer to send number ``cancel_at`` (1-based) asks to cancel."""

    def __init__(self, cancel_at: int | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.control: str | None = None
        self.cancel_at = cancel_at

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)
        if self.cancel_at is not None and len(self.sent) >= self.cancel_at:
            self.control = "cancel"


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} plus one?"},
                {"role": "assistant", "content": f"{i + 1}"},
            ]
        }
        for i in range(n)
    ]


def _tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def test_preparing_counts_rows_and_a_cancel_stops_tokenizing(tiny_model_dir) -> None:
    tok, policy = _tokenizer(tiny_model_dir), LossPolicy.from_config({})
    events = Events()
    progress = tokenizing_progress(events, 600)
    progress(0)
    prepared = prepare_examples(tok, _rows(600), policy, 512, progress=progress)
    assert len(prepared.examples) == 600
    counts = [(e["rowsDone"], e["rowsTotal"]) for e in events.sent]
    assert counts == [(0, 600), (256, 600), (512, 600), (600, 600)]
    assert events.sent[2]["detail"] == "tokenizing rows: 512 of 600 done"
    assert {e["phase"] for e in events.sent} == {"PREPARING"}

    # the answer to the 256-row report asks to cancel: the next batch is never tokenized
    events = Events(cancel_at=2)
    progress = tokenizing_progress(events, 600)
    progress(0)
    with pytest.raises(CancelledWhileTokenizing):
        prepare_examples(tok, _rows(600), policy, 512, progress=progress)
    assert [e["rowsDone"] for e in events.sent] == [0, 256]

    # the service keeps the latest counts for runs get
    run = Run(id="r", state="PREPARING", results=None)
    for ev in events.sent:
        apply_event(None, None, run, RunAttempt(number=1, state="PREPARING"), ev)
    assert run.results["preparing"] == {"rowsDone": 256, "rowsTotal": 600}
    assert run.phase_detail == "tokenizing rows: 256 of 600 done"


class RefusingStore(BlobStore):
    """A file blob store that refuses one write (a full disk, an expired credential):
    ``put_file`` raises OSError for keys that start with ``refused``."""

    def __init__(self, url: str, refused: str) -> None:
        super().__init__(url)
        self.refused = refused

    def put_file(self, key: str, path: Any) -> None:
        if key.startswith(self.refused):
            raise OSError(28, "No space left on device")
        super().put_file(key, path)


def test_a_save_the_store_refuses_is_named_by_step_and_the_run_goes_on(tmp_path) -> None:
    url = f"file://{tmp_path / 'blobs'}"
    # the second file of step 2's state: the first is written, then must not be left
    store = RefusingStore(url, "runs/r/saves/step-2/state/rng.json")
    spec = JobSpec(
        run_id="r",
        attempt=1,
        callback_url="http://127.0.0.1:1",
        token="t",
        blobs_url=url,
        model_dir=str(tmp_path),
        dataset={},
        state_prefix="runs/r/saves",
        extra={"save_retry_s": 0},
    )
    events = Events()
    emit = uploading(spec, store, events, {"tokens": 0, "seconds": 0.0})
    for step in (1, 2, 3):
        state = tmp_path / f"state-{step}"
        state.mkdir()
        (state / "optimizer.pt").write_bytes(b"x" * 10)
        (state / "rng.json").write_bytes(b"{}")
        emit({"type": "save", "step": step, "stateDir": str(state)})
    kinds = [(e["type"], e["step"]) for e in events.sent]
    assert kinds == [("save", 1), ("warning", 2), ("save", 3)]
    assert events.sent[1]["code"] == "unrecorded_save"
    assert "step 2 could not be written" in events.sent[1]["message"]
    assert "No space left on device" in events.sent[1]["message"]
    assert events.sent[2]["stateKey"] == "runs/r/saves/step-3/state"
    assert store.list("runs/r/saves/step-2") == []  # nothing half-written is left
    assert len(store.list("runs/r/saves/step-3")) == 2

    run = Run(id="r", state="RUNNING", results=None)
    for ev in events.sent[1:2]:
        apply_event(None, None, run, RunAttempt(number=1, state="RUNNING"), ev)
    assert run.results["unrecordedSaves"] == [2]
    assert run.results["warnings"][0]["code"] == "unrecorded_save"
