"""The worker of a Tinker training client: one engine training session, driven by the
service's queue (``spec.worker`` of the ``tinker`` kind, :mod:`akka_optimize.tinker.kind`).

The worker builds a :class:`~akka_optimize.engine.session.training.TrainingSession` from the spec's
engine settings, then long-polls ``POST …/attempts/N/tinker/next`` with its attempt token;
each answer is one protocol call (``forward_backward``, ``forward``, ``optim_step``,
``save_weights``, ``save_weights_for_sampler``, ``save_weights_external``, a sampler snapshot,
``sample``), already in ``seq_id`` order,
and the next poll carries its result. A call the engine refuses answers its future with
the sentence and leaves the session as it was. Each ``optim_step`` is also a ``metrics``
event (``runs metrics``). The worker ends (its run ``SUCCEEDED``) when the client's session
finishes or after ``extra.idle_seconds`` without a call, saying which. A sampling
client's worker (``extra.sampler``, :mod:`akka_optimize.tinker.samplers`) first loads the
saved adapter it names (if any), answers ``sample`` only, and saves nothing when idle.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from ..engine.config import EngineConfig
from ..engine.errors import EngineError
from ..jobs.blobs import download_prefix, upload_dir
from ..jobs.spec import JobSpec
from ..store import BlobStore
from .datums import DatumError, adam_params, to_passes
from .sampling import sample
from .snapshots import Snapshots


class Calls:
    """The protocol calls on one session (``handle(op, body)`` → the result JSON)."""

    def __init__(self, session: Any, spec: JobSpec, store: BlobStore, events: Any, work: Path):
        self.session, self.spec, self.store, self.events, self.work = (
            session,
            spec,
            store,
            events,
            work,
        )
        self.snapshots = Snapshots(session)

    def handle(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run one call; raises DatumError / EngineError with a sentence (a sampling
        client's worker answers ``sample`` only)."""
        if self.spec.extra.get("sampler") and op != "sample":
            raise DatumError(f"{op}: this is a sampling client; it only samples.")
        return getattr(self, "op_" + op)(body)

    def _passes(self, body: dict[str, Any], backward: bool) -> dict[str, Any]:
        s = self.session
        if body.get("refused"):
            raise DatumError(body["refused"])
        passes, inputs = to_passes(
            body["data"], body["loss_fn"], body["loss_fn_config"], s.vocab_size
        )
        run = s.forward_backward if backward else s.forward
        res = run(passes, body["loss_fn"], loss_inputs=inputs, loss_config=body["loss_fn_config"])
        if not math.isfinite(res.loss_sum):
            raise EngineError(f"the summed loss is {res.loss_sum}; nothing should be applied.")
        logprobs = [lp[1:].tolist() for lp in res.logprobs]
        return {"logprobs": logprobs, "metrics": {"loss:sum": res.loss_sum}}

    def op_forward_backward(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._passes(body, backward=not body.get("forward_only"))

    def op_optim_step(self, body: dict[str, Any]) -> dict[str, Any]:
        m = self.session.optim_step_sum(**adam_params(body.get("adam_params")))
        self.events.send(
            {
                "type": "metrics",
                "step": m["step"],
                "loss": m["lossSum"],
                "gradNorm": m["gradNorm"],
                "learningRate": m["learningRate"],
                "supervisedTokens": m["supervisedTokens"],
            }
        )
        return {"metrics": {"grad_norm:mean": m["gradNorm"], "loss:sum": m["lossSum"]}}

    def _upload(self, kind: str, name: str, save: Any) -> tuple[str, int]:
        local = self.work / kind / name
        save(local)
        key = f"runs/{self.spec.run_id}/tinker/{kind}/{name}"
        return key, upload_dir(self.store, local, key)

    def op_save_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("refused"):
            raise DatumError(body["refused"])
        key, size = self._upload("weights", body["name"], self.session.save_state)
        return {"key": key, "bytes": size, "step": self.session.step}

    def op_save_weights_for_sampler(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("refused"):
            raise DatumError(body["refused"])
        key, size = self._upload("sampler_weights", body["name"], self.session.save_adapter)
        return {"key": key, "bytes": size, "step": self.session.step}

    def op_save_weights_external(self, body: dict[str, Any]) -> dict[str, Any]:
        """``save_weights_external(name)``: the adapter as a PEFT folder (what ``tinker
        checkpoint download`` fetches through signed URLs)."""
        if body.get("refused"):
            raise DatumError(body["refused"])
        key, size = self._upload("external_weights", body["name"], self.session.save_adapter)
        return {"key": key, "bytes": size, "step": self.session.step}

    def op_load_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        """Restore a saved state: adapter, step and RNG; the AdamW moments only with
        ``optimizer`` (otherwise they start fresh)."""

        local = self.work / "load" / body["key"].rsplit("/", 1)[-1]
        download_prefix(self.store, body["key"], local)
        meta = self.session.load_state(local)
        if not body.get("optimizer"):
            self.session.optimizer.state.clear()
        return {"type": "load_weights", "path": body.get("path"), "step": meta["step"]}

    def op_sampler_snapshot(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"step": self.snapshots.take()}

    def op_sample(self, body: dict[str, Any]) -> dict[str, Any]:
        """Sample the weights of the snapshot's step: the session's own, or a kept earlier
        snapshot's swapped in for the call (:mod:`akka_optimize.tinker.snapshots`)."""

        now = {**body, "snapshot_step": self.session.step}
        earlier = self.snapshots.call_at(
            body.get("snapshot_step"), lambda: sample(self.session, now)
        )
        return earlier if earlier is not None else sample(self.session, body)


def _build(spec: JobSpec) -> Any:
    from ..engine.session.training import TrainingSession  # lazy: safetensors

    cfg = EngineConfig(**spec.engine)
    return TrainingSession(Path(spec.model_dir), cfg)


def serve(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """The ``tinker`` kind's worker function: serve calls until the session ends."""
    events.send({"type": "phase", "phase": "PREPARING", "detail": "loading the base model"})
    session = _build(spec)
    events.send(
        {
            "type": "phase",
            "phase": "RUNNING",
            "detail": "serving a Tinker training client",
            "adaptedModules": session.adapted_modules,
        }
    )
    calls = Calls(session, spec, store, events, work)
    if spec.extra.get("load"):  # create_training_client_from_state[_with_optimizer]
        calls.op_load_weights(spec.extra["load"])
    sampler = spec.extra.get("sampler") or {}
    if sampler.get("key"):  # create_sampling_client(model_path=…): the saved adapter
        from ..jobs.blobs import download_prefix  # lazy: guarded

        session.load_adapter_weights(download_prefix(store, sampler["key"], work / "sampler"))
    idle_s = float(spec.extra.get("idle_seconds", 1800))
    last = time.monotonic()
    answer: dict[str, Any] = {"ready": {"vocab": session.vocab_size}}
    while True:
        r = events.post("tinker/next", {**answer, "wait": idle_s}, timeout=120)
        if r.status_code != 200:
            raise RuntimeError(f"the service refused the worker's poll: {r.text[:300]}")
        reply = r.json()
        if reply.get("cancel"):  # `training runs cancel`: its saved states stay
            return {"type": "cancelled"}
        if reply.get("save") and not sampler:  # its session went silent: save, then end
            saved = calls.op_save_weights({"name": "heartbeat"})
            result = {"ended": reply["end"], "stateKey": saved["key"], "bytes": saved["bytes"]}
            return {"type": "completed", "result": {**result, "stateName": "heartbeat"}}
        if reply.get("end"):
            return {"type": "completed", "result": {"ended": reply["end"]}}
        item = reply.get("item")
        answer = {}
        if item is None:
            if time.monotonic() - last > idle_s and sampler:  # nothing to save
                ended = f"no call for {idle_s:g} s (service.tinkerIdleSeconds)"
                return {"type": "completed", "result": {"ended": ended}}
            if time.monotonic() - last > idle_s:  # save, then release the device
                saved = calls.op_save_weights({"name": "idle"})
                ended = f"no call for {idle_s:g} s (service.tinkerIdleSeconds)"
                result = {"ended": ended, "stateKey": saved["key"], "bytes": saved["bytes"]}
                return {"type": "completed", "result": result}
            continue
        last = time.monotonic()
        try:
            result, error = calls.handle(item["op"], item["body"]), None
        except (DatumError, EngineError) as exc:
            result, error = None, getattr(exc, "message", None) or str(exc)
        except Exception as exc:  # the call fails; the session and the run go on
            result, error = None, f"The call failed in the worker: {type(exc).__name__}: {exc}"
        answer = {"request_id": item["request_id"], "result": result, "error": error}
