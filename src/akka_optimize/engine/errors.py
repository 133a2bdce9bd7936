"""Errors the engine raises; each is a sentence a user can act on.

They subclass :class:`akka_optimize.errors.AkkaError` (plain Python, no HTTP), so the
run lifecycle can copy ``message`` into a run's failure reason and ``code`` /
``field`` into its API error without translating (DESIGN.md "Errors are sentences").
"""

from __future__ import annotations

from ..errors import AkkaError


class EngineError(AkkaError):
    """Training cannot continue: bad settings, a non-finite loss, an empty update."""

    code = "training_failed"


class EngineOutOfMemory(EngineError):
    """The device ran out of memory during a pass.

    Attributes:
        step: the 1-based update that failed.
        micro_batch: conversations per pass at the time.
        pass_tokens: tokens in the largest pass of that update.
        device: ``"cpu"`` or ``"cuda"``.
    """

    code = "out_of_memory"

    def __init__(self, *, step: int, micro_batch: int, pass_tokens: int, device: str) -> None:
        smaller = max(1, micro_batch // 2)
        if micro_batch > 1:
            hint = (
                f"set config.hyperparams.training.microBatchPerGpu to {smaller} "
                f"(raising gradientAccumulation keeps the same update) or lower config.maxSeqLength"
            )
        else:
            hint = (
                "lower config.maxSeqLength below the longest pass "
                f"({pass_tokens} tokens) or turn on config.model.gradientCheckpointing"
            )
        super().__init__(
            f"The {device} device ran out of memory at update {step} with "
            f"{micro_batch} conversation(s) per pass ({pass_tokens} tokens); {hint}.",
            field="config.hyperparams.training.microBatchPerGpu"
            if micro_batch > 1
            else "config.maxSeqLength",
        )
        self.step = step
        self.micro_batch = micro_batch
        self.pass_tokens = pass_tokens
        self.device = device


class AdapterCheckError(EngineError):
    """A saved adapter does not load onto its base model (seeds/001: the adapter check).

    Attributes:
        held_tensors, held_parameters: what the adapter file holds.
        expected_tensors, expected_parameters: what the base model at this rank expects.
        problems: short descriptions (missing, extra, wrong shape), at most a few names each.
    """

    code = "adapter_check_failed"

    def __init__(
        self,
        message: str,
        *,
        held_tensors: int,
        held_parameters: int,
        expected_tensors: int,
        expected_parameters: int,
        problems: list[str],
    ) -> None:
        super().__init__(
            message,
            details={
                "heldTensors": held_tensors,
                "heldParameters": held_parameters,
                "expectedTensors": expected_tensors,
                "expectedParameters": expected_parameters,
                "problems": problems,
            },
        )
        self.held_tensors = held_tensors
        self.held_parameters = held_parameters
        self.expected_tensors = expected_tensors
        self.expected_parameters = expected_parameters
        self.problems = problems
