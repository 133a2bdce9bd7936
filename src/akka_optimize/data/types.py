"""The tokens-and-weights contract between ``data/`` and ``engine/``.

``data/`` hands the engine token ids and one weight per token, never messages
(STYLE.md 2). Weights are aligned to ``input_ids``: ``weights[t]`` is the weight of
the loss for *predicting* ``input_ids[t]`` from ``input_ids[:t]``, so ``weights[0]``
of every sequence is 0 and the engine's causal shift (seeds/004 datum format:
``model_input = tokens[:-1]``, ``target_tokens = tokens[1:]``,
``weights = weights[1:]``) never lets a label cross a sequence boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    """One tokenized conversation.

    Attributes:
        input_ids: token ids of the rendered conversation, length L.
        weights: length L; 1.0 where the token is supervised, 0.0 elsewhere
            (``weights[0]`` is always 0.0).
        row: 1-based line number of the row in its dataset file.
        vision: None for text; for an image row on a multimodal model, the processor's
            vision inputs (numpy arrays, batch dimension 1: ``pixel_values`` and the
            family's others), whose image tokens are in ``input_ids``
            (:mod:`akka_optimize.data.vision`).
    """

    input_ids: list[int]
    weights: list[float]
    row: int = 0
    vision: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.weights):
            raise ValueError(
                f"row {self.row}: {len(self.input_ids)} tokens but {len(self.weights)} weights"
            )

    @property
    def supervised_tokens(self) -> int:
        """How many tokens carry a non-zero weight."""
        return sum(1 for w in self.weights if w)


@dataclass(frozen=True)
class Pass:
    """Whole conversations packed into one sequence for one forward pass.

    Attributes:
        input_ids: concatenated token ids, length T.
        weights: length T, each sequence's weights (first token of each sequence 0.0).
        position_ids: length T, restarting at 0 for each sequence.
        cu_seqlens: sequence boundaries ``[0, L1, L1+L2, …, T]`` (length n+1).
        rows: the ``row`` of each packed example, in order.
        vision: the vision inputs of a pass that is one image row (``Example.vision``).
    """

    input_ids: list[int]
    weights: list[float]
    position_ids: list[int]
    cu_seqlens: list[int]
    rows: list[int] = field(default_factory=list)
    vision: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def supervised_tokens(self) -> int:
        return sum(1 for w in self.weights if w)


@dataclass(frozen=True)
class PreferencePair:
    """One tokenized preference pair (:mod:`akka_optimize.data.preference`): the preferred
    (``chosen``) and non-preferred (``rejected``) conversations, each with weights 1.0 on
    its answer's tokens only; ``row`` its line in the dataset file."""

    chosen: Example
    rejected: Example
    row: int

    @property
    def tokens(self) -> int:
        """Tokens of both conversations."""
        return len(self.chosen.input_ids) + len(self.rejected.input_ids)


def pack_examples(examples: list[Example]) -> Pass:
    """Concatenate ``examples`` into one :class:`Pass` (no budget, order kept).

    An image row (``Example.vision``) is a pass of its own: the vision inputs belong to
    one sequence.

    Raises:
        ValueError: ``examples`` is empty, or an image row is packed with another row.
    """
    if not examples:
        raise ValueError("cannot pack an empty list of examples")
    if len(examples) > 1 and any(ex.vision for ex in examples):
        raise ValueError(f"rows {[ex.row for ex in examples]}: an image row is a pass of its own")
    ids: list[int] = []
    ws: list[float] = []
    pos: list[int] = []
    cu = [0]
    for ex in examples:
        ids.extend(ex.input_ids)
        w = list(ex.weights)
        w[0] = 0.0
        ws.extend(w)
        pos.extend(range(len(ex.input_ids)))
        cu.append(len(ids))
    return Pass(ids, ws, pos, cu, [ex.row for ex in examples], examples[0].vision)
