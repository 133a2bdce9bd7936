"""Tables of the jobs concern (declared by that package's issue)."""

from __future__ import annotations
