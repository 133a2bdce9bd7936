"""A worker's attempt token, checked for the routes only that attempt may call (its
``model:`` judge, :mod:`akka_optimize.service.routers.run_records`; a Tinker client's
worker poll, :mod:`akka_optimize.service.routers.tinker.worker`)."""

from __future__ import annotations

from ..errors import Conflict
from ..jobs import events
from ..jobs import states as S
from .context import ServiceContext


def check_running_attempt(ctx: ServiceContext, run_id: str, number: int, token: str) -> None:
    """Refuse a ``token`` that is not attempt ``number`` of run ``run_id``'s, or an attempt
    that has ended (reads the state store in its own session: an async route calls it in
    the thread pool).

    Raises:
        NotFound: the run has no such attempt for this token. Conflict: (``attempt``) the
            attempt has ended.
    """
    with ctx.db.session() as s:
        att = events.authorize_attempt(s, run_id, number, token)
        if att.state in S.TERMINAL:
            raise Conflict(f"Run {run_id}'s attempt {number} has ended.", field="attempt")
