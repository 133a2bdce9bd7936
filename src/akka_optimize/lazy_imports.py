"""Names from ``transformers`` for code that runs in the service's request threads.

``transformers`` resolves its top-level names lazily on first access, and that first access
is not thread-safe: two requests resolving ``AutoConfig`` at once made one of them fail
with ``ImportError: cannot import name 'AutoConfig' from 'transformers'`` (seen as a 500 on
two run submissions sent at the same moment, on PostgreSQL, where requests do not queue
behind SQLite's write lock). Every such access in the service's process goes through one
lock here; the first costs the import of transformers and torch (about 2 s), later ones
nothing.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()


def transformers_names(*names: str) -> tuple[Any, ...]:
    """``transformers.<name>`` for each of ``names``, resolved under one process-wide lock.

    Raises:
        AttributeError: a name transformers does not have.
    """
    with _LOCK:
        import transformers

        return tuple(getattr(transformers, name) for name in names)
