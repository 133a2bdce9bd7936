"""Routes of the registry resource."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
