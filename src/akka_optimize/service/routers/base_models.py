"""Routes of the base_models resource."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
