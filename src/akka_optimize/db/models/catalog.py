"""Tables of the catalog concern (declared by that package's issue)."""

from __future__ import annotations
