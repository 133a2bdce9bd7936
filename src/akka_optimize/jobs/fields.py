"""Reading a setting out of a resolved plan by its dotted path (``config.hyperparams.lora.rank``).

The floor every run-specific module stands on (mapping, branches, warm starts, sweeps): it
imports nothing of the package, so any of them can use it without importing another.
"""

from __future__ import annotations

from typing import Any


def setting(d: dict[str, Any] | None, path: str, default: Any = None) -> Any:
    """The value at dotted ``path`` in ``d``; ``default`` when a part is missing or the value
    is None. ``setting({"a": {"b": 2}}, "a.b") == 2``."""
    cur: Any = d or {}
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return default if cur is None else cur
