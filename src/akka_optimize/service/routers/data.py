"""Routes of the data resource."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
