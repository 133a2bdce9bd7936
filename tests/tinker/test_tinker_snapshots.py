"""A training client's sampler snapshots keep their step's weights (issue 53: the
cookbook's DPO scores its step-0 reference snapshot at every update): on the tiny model's
engine session in-process, a kept snapshot's call sees that step's adapter, the session's
own weights come back bit for bit, and the least recently used snapshot past
:data:`~akka_optimize.tinker.snapshots.KEEP` is dropped."""

from __future__ import annotations

from pathlib import Path

import torch

from akka_optimize.data.types import Pass
from akka_optimize.engine.config import EngineConfig
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.tinker.datums import adam_params
from akka_optimize.tinker.kind import ATTN, MLP
from akka_optimize.tinker.snapshots import Snapshots

IDS = [5, 17, 230, 41, 9, 88, 310, 12]


def _pass() -> Pass:
    n = len(IDS)
    return Pass(IDS, [0.0] + [1.0] * (n - 1), list(range(n)), [0, n])


def _logprobs(session: TrainingSession) -> torch.Tensor:
    return session.forward([_pass()]).logprobs[0].clone()


def _update(session: TrainingSession) -> None:
    session.forward_backward([_pass()], "cross_entropy")
    session.optim_step_sum(**adam_params({"learning_rate": 5e-2}))


def test_a_kept_snapshot_answers_with_its_step_and_the_session_is_restored(
    tiny_model_dir: Path,
) -> None:
    cfg = EngineConfig(lora_rank=4, lora_alpha=8.0, seed=1, device="cpu", target_modules=ATTN + MLP)
    session = TrainingSession(tiny_model_dir, cfg)
    snaps = Snapshots(session, keep=2)
    _update(session)  # B is no longer zero: the snapshot's adapter is not the base model
    assert snaps.take() == 1
    at_1 = _logprobs(session)
    _update(session)
    own = {n: p.detach().clone() for n, p in session.model.named_parameters() if p.requires_grad}
    at_2 = _logprobs(session)
    assert (at_2 - at_1).abs().max() > 1e-4

    again = snaps.call_at(1, lambda: _logprobs(session))
    assert again is not None and torch.equal(again, at_1)
    assert snaps.call_at(2, lambda: _logprobs(session)) is None  # the current step: as is
    for n, p in session.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, own[n]), n
    assert torch.equal(_logprobs(session), at_2)

    snaps.take()  # step 2
    _update(session)
    snaps.take()  # step 3: step 1, used least recently, is dropped
    assert list(snaps.kept) == [2, 3]
    assert snaps.call_at(1, lambda: _logprobs(session)) is None
