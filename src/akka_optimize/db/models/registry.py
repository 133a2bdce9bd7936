"""Tables of the registry concern (declared by that package's issue)."""

from __future__ import annotations
