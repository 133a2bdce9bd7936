"""What an endpoint worker serves: its engine, the served model names and their instructions.

Shared by the worker's request handling (:mod:`akka_optimize.serving.worker_app`,
:mod:`akka_optimize.serving.completions`) and its process loop
(:mod:`akka_optimize.serving.worker`), which import it; it imports neither.
"""

from __future__ import annotations

from pathlib import Path

from .engine import ServingEngine, adapter_rank
from .schema import OpenAIError


class WorkerState:
    """The engine plus the names and instructions of the models it serves.

    ``base_name`` is the base model's served name; ``instructions`` maps a served
    model name to its training instructions (None when it has none).
    """

    def __init__(
        self, engine: ServingEngine, base_name: str, *, max_rank: int, token: str | None
    ) -> None:
        self.engine = engine
        self.base_name = base_name
        self.max_rank = max_rank
        self.token = token
        self.instructions: dict[str, str | None] = {base_name: None}

    def models(self) -> list[str]:
        """Served model names: the base first, then the adapters."""
        return [self.base_name] + self.engine.adapter_names()

    def adapter_for(self, model: str) -> str | None:
        """The adapter a request's ``model`` names (None: the base model).

        Raises:
            OpenAIError: 400 ``model_not_found`` naming the served models.
        """
        if model not in self.instructions:
            raise OpenAIError(
                f"The model {model!r} does not exist on this endpoint; it serves "
                f"{', '.join(self.models())}.",
                param="model",
                code="model_not_found",
            )
        return None if model == self.base_name else model

    def add_adapter(self, name: str, path: Path, instructions: str | None) -> None:
        """Load adapter ``name`` from ``path``.

        Raises:
            OpenAIError: the folder is not a PEFT adapter, or its rank is above the limit.
        """
        try:
            rank = adapter_rank(path)
        except ValueError as exc:
            raise OpenAIError(str(exc), param="path", code="invalid_adapter") from exc
        if rank > self.max_rank:
            raise OpenAIError(
                f"The adapter {name} has rank {rank}, above the largest rank this endpoint "
                f"loads ({self.max_rank}).",
                param="path",
                code="rank_too_large",
            )
        self.engine.load_adapter(name, path)
        self.instructions[name] = instructions
