"""The ``phase`` events a training loop emits when its session is ready and when it ends
(shared by the supervised loop, :mod:`akka_optimize.engine.sft`, and the reinforcement
loop, :mod:`akka_optimize.engine.rl.loop`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session.training import TrainingSession


def training_phase(session: TrainingSession, total: int) -> dict[str, Any]:
    """The ``training`` phase event a loop emits once its session is ready: the step it
    starts after, ``totalSteps`` and the ``adaptedModules`` (full module paths)."""
    return {
        "type": "phase",
        "phase": "training",
        "step": session.step,
        "totalSteps": total,
        "adaptedModules": session.adapted_modules,
    }


def end_phase(result: Any) -> dict[str, Any]:
    """The last ``phase`` event of a training loop: ``paused`` or ``finished`` at its step,
    with its final and mean loss."""
    return {
        "type": "phase",
        "phase": "paused" if result.stopped else "finished",
        "step": result.step,
        "finalLoss": result.final_loss,
        "meanLoss": result.mean_loss,
    }
