"""The sampling settings of an evaluation's answers, shared by the evaluation, comparison
and project-settings bodies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Sampling(BaseModel):
    """How the answers are sampled; a setting left out takes its default (greedy, 256 tokens)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(0.0, ge=0, le=2, description="0 is greedy.")
    topP: float = Field(1.0, gt=0, le=1)  # noqa: N815 (the API's camelCase)
    maxTokens: int = Field(256, ge=1, le=32768)  # noqa: N815
    seed: int | None = Field(0, ge=0, le=2**31 - 1)
