"""Request and event types shared by the serving engines and the batcher."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """How to sample one request.

    ``temperature`` 0 is greedy (argmax); ``top_p`` in (0, 1] keeps the smallest set
    of tokens whose probability reaches it; ``seed`` makes sampling repeatable;
    ``n`` answers are sampled in one batch; generation of an answer ends at a stop
    token, at a ``stop`` string (not included in the text) or after ``max_tokens``.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)


@dataclass
class StepEvent:
    """What one decoding step produced for answer ``index``: new text and, at the
    end, ``finish_reason`` (``stop`` or ``length``)."""

    index: int
    delta: str
    finish_reason: str | None = None
    n_tokens: int = 0
