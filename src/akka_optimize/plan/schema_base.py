"""The base of every run-plan record and the value sets shared by its groups.

Every model of :mod:`akka_optimize.plan.schema` derives from :class:`_Group`: unknown fields
refused (``extra="forbid"``), types strict (``"16"`` is not a rank), no infinities or NaN.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Group(BaseModel):
    """Base of every plan record: unknown fields refused, types strict."""

    model_config = ConfigDict(
        extra="forbid", strict=True, populate_by_name=False, allow_inf_nan=False
    )


SchedulerKind = Literal["constant", "linear", "cosine"]
Precision = Literal["fp32", "bf16"]
AttentionImplementation = Literal["sdpa", "eager", "flash_attention_2", "flex_attention"]
