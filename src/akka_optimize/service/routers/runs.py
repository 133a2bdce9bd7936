"""Routes of the runs resource."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
