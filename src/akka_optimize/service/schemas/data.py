"""Response schema of ``POST /v1/training/data/preview`` (:func:`akka_optimize.data.preview.preview`)."""

from __future__ import annotations

from pydantic import Field

from .common import View


class Segment(View):
    """A run of rendered text, supervised or not."""

    text: str = Field(description="The text.")
    supervised: bool = Field(description="Whether its tokens count in the loss.")


class PreviewRow(View):
    """One rendered row, or the reason the chat template cannot render it."""

    row: int = Field(description="The row's number in the dataset (1-based).")
    segments: list[Segment] | None = Field(None, description="The rendered text, in order.")
    tokens: int | None = Field(None, description="Tokens of the rendered row.")
    supervised_tokens: int | None = Field(None, description="Tokens the loss counts.")
    warnings: list[str] | None = Field(None, description="What looks wrong in the rendering.")
    error: str | None = Field(None, description="Why the row cannot be rendered.")


class LossView(View):
    """The loss policy the preview marks supervised spans by."""

    assistantTurns: str = Field(description="all or last: which assistant turns train.")
    trainOnToolCalls: bool = Field(description="Whether tool calls train.")
    trainOnToolResults: bool = Field(description="Whether tool results train.")


class Preview(View):
    """Rows rendered by the base model's chat template, supervised spans marked."""

    baseModel: str = Field(description="The base model whose template rendered them.")
    source: str = Field(
        description="The pinned dataset, the jsonl filename (rows.jsonl by default), or rows."
    )
    loss: LossView = Field(description="The loss policy.")
    rows: list[PreviewRow] = Field(description="The rendered rows, in order.")
