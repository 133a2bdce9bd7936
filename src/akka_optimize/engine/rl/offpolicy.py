"""Off-policy rollouts (``rlHyperparams.maxStaleness`` = k > 0; issue 52 item 3): the
samples of the next updates are drawn on a thread while the current update trains.

The rollout side (:class:`RolloutSide`) is a copy of the session's model that shares its
frozen base weights and holds its own adapter. Update ``u`` is always sampled from the
adapter after update ``v(u) = max(s, u − 1 − k)`` (``s`` the step the attempt started
at): never more than k updates old, and the same version whatever the two threads'
timing, so a run's samples do not depend on which thread was faster. The sampler may run
ahead of the trainer by up to k updates: it waits only for the version it needs.

Weights move one way, after the optimizer step, from the main thread (DATA-AND-TRAINING-
RULES.md rule 20: "with background prefetch, sync only from the main thread after the
optimizer step"): :meth:`RolloutSide.publish` copies the new adapter into a history of
versions; the sampler thread loads the version an update needs into its own copy before
drawing it. Every sample records the version that drew it (``Sample.weight_version``), and
each update's metrics its ``weightVersion`` and ``staleness``.

With vLLM (:mod:`akka_optimize.engine.rollout_vllm`) the rollout side holds no copy of
the model: :meth:`RolloutSide.publish` writes the new adapter version to its folder from
the main thread, and the sampler thread draws each update through vLLM with the LoRA of
the version it needs.

k = 0 never creates a rollout side: every update samples with the session's own weights
(the on-policy loop, unchanged). On a resume the first updates sample from the resumed
adapter (their staleness is below k): the versions before it were not saved.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ..errors import EngineError
from ..session.passes import PassesMixin
from .settings import RLPrompt, RLSettings, Sample
from .step import draw


def rollout_version(update: int, max_staleness: int, start: int) -> int:
    """The adapter version (updates applied) that samples 1-based ``update``:
    ``max(start, update − 1 − max_staleness)``."""
    return max(start, update - 1 - max_staleness)


class RolloutSide:
    """The sampler thread and its own copy of the model (see the module docstring).

    Args:
        session: the training session; its model is copied (base weights shared, the
            adapter copied) and its current adapter is version ``session.step``.
        settings: the loop's settings (``max_staleness`` ≥ 1).
        prompts_for: 1-based update → its prompts.
        stop_ids: tokens that end a completion.
        last_update: the run's last update (the thread draws up to it).
        backend: a :class:`~akka_optimize.engine.rollout_vllm.VLLMRollout` that draws in
            place of a copy of the model (None: the copy, with the lean sampler).

    Raises:
        EngineError: ``max_staleness`` < 1 (a run on several ranks is refused before,
            :func:`akka_optimize.engine.rl.ranks.check_rank_session`).
    """

    def __init__(
        self,
        session: Any,
        settings: RLSettings,
        prompts_for: Callable[[int], list[RLPrompt]],
        stop_ids: set[int],
        last_update: int,
        backend: Any = None,
    ) -> None:
        if settings.max_staleness < 1:
            raise EngineError("a rollout side samples ahead only with maxStaleness ≥ 1.")
        self.settings, self.stop_ids, self.prompts_for = settings, stop_ids, prompts_for
        self.device, self.dtype = session.device, session.dtype
        self.weight_dtype, self.adapter_dtype = session.weight_dtype, session.adapter_dtype
        self.start, self.last = session.step, last_update
        self.backend = backend
        if backend is None:
            self.model = _copy_model(session.model)
            self._own = {n: p for n, p in self.model.named_parameters() if n in session.params}
        self.version: int | None = None
        self._history: dict[int, dict[str, torch.Tensor] | None] = {}
        self._results: dict[int, Any] = {}
        self._cond = threading.Condition()
        self._stop = False
        self.publish(session)
        self._thread = threading.Thread(target=self._run, name="rollout", daemon=True)
        self._thread.start()

    def compute_context(self) -> contextlib.AbstractContextManager:
        """The session's compute context rule, over this copy's LoRA layers."""
        return PassesMixin.compute_context(self)  # type: ignore[arg-type]

    def publish(self, session: Any) -> None:
        """Keep the session's adapter as version ``session.step`` for the sampler (call
        from the main thread after each update's optimizer step); with vLLM, write it to
        the version's folder."""
        snap = None
        if self.backend is not None:
            self.backend.publish(session)
        else:
            snap = {n: p.detach().clone() for n, p in session.params.items()}
        with self._cond:
            self._history[session.step] = snap
            self._cond.notify_all()

    def take(self, update: int) -> tuple[list[Sample], float]:
        """The samples of ``update`` and their sampling seconds, waiting for them.

        Raises:
            whatever the sampler thread raised while drawing them.
        """
        with self._cond:
            while update not in self._results:
                self._cond.wait()
            got = self._results.pop(update)
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        """Stop the sampler thread and wait for it (its current draw ends first)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()

    def _load(self, version: int) -> None:
        with self._cond:
            while version not in self._history and not self._stop:
                self._cond.wait()
            if self._stop:
                return
            snap = self._history[version]
            for old in [v for v in self._history if v < version]:
                del self._history[old]
        if snap is not None:
            with torch.no_grad():
                for name, p in self._own.items():
                    p.copy_(snap[name])
        self.version = version

    def _run(self) -> None:
        for update in range(self.start + 1, self.last + 1):
            version = rollout_version(update, self.settings.max_staleness, self.start)
            try:
                if self.version != version:
                    self._load(version)
                if self._stop:
                    return
                how: Any = self.backend.draw if self.backend is not None else partial(draw, self)
                got: Any = how(
                    self.prompts_for(update), self.settings, self.stop_ids, update, version
                )
            except BaseException as exc:  # handed to the main thread by take()
                got = exc
            with self._cond:
                self._results[update] = got
                self._cond.notify_all()
                if isinstance(got, BaseException):
                    return


def _copy_model(model: Any) -> Any:
    """A deep copy of ``model`` whose frozen parameters and buffers are the original's own
    tensors (shared, never written) and whose trainable ones (the adapter) are copies
    without gradients, in eval mode."""
    memo: dict[int, Any] = {id(p): p for p in model.parameters() if not p.requires_grad}
    memo.update({id(b): b for b in model.buffers()})
    twin = copy.deepcopy(model, memo)
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin.eval()
