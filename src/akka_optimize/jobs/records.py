"""Job records: finding a run by ID and moving it (and its attempt) into a state.

Every other module of ``jobs/`` that changes a run's state goes through :func:`finish` or
:func:`end_attempt`, so a run that stops always has ``finished_at`` set and its pending
control request cleared. The states themselves are in :mod:`akka_optimize.jobs.states`.
"""

from __future__ import annotations

import secrets
import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.auth import ApiToken, hash_token
from ..db.models.jobs import Run, RunAttempt
from ..errors import InvalidRequest, NotFound
from . import states as S


def get_run(session: Session, run_id: str) -> Run:
    """The run with this ID or an unambiguous ID prefix. Raises NotFound / InvalidRequest."""
    run = session.get(Run, run_id)
    if run is not None:
        return run
    matches = session.scalars(
        select(Run).where(Run.id.startswith(run_id, autoescape=True)).limit(3)
    ).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"No run {run_id!r}.", field="run")
    raise InvalidRequest(
        f"The run ID prefix {run_id!r} matches several runs; give more of it.", field="run"
    )


def finish(run: Run, state: str, reason: str | None = None) -> None:
    """End ``run`` in ``state`` now (no attempt involved: queued, paused or reaped runs)."""
    run.state = state
    run.finished_at = utcnow()
    run.control = None
    if reason:
        run.failure_reason = reason


def end_attempt(run: Run, att: RunAttempt, state: str, reason: str | None = None) -> None:
    """End attempt ``att`` and move ``run`` to ``state`` as the attempt's worker reported.

    A paused run's attempt ends ``SUCCEEDED`` (it stopped as asked); a paused run keeps no
    ``finished_at`` since it may resume.
    """
    att.state = S.SUCCEEDED if state in (S.SUCCEEDED, S.PAUSED) else state
    att.ended_at = utcnow()
    run.state = state
    run.control = None
    run.phase_detail = None
    if state in S.TERMINAL:
        run.finished_at = utcnow()
    if reason:
        run.failure_reason = reason


def attempt_token(s: Session, run: Run) -> tuple[int, str]:
    """The number of ``run``'s next attempt and a new worker token for it (``ak_w_…``),
    stored hashed as a token acting as ``worker:RUN`` (it may post that run's events only:
    :func:`akka_optimize.jobs.events.authorize_attempt`). The caller records the attempt
    with ``token_sha256=hash_token(token)``."""
    number = (
        s.scalar(select(func.max(RunAttempt.number)).where(RunAttempt.run_id == run.id)) or 0
    ) + 1
    token = "ak_w_" + secrets.token_urlsafe(24)
    s.add(ApiToken(id=uuid.uuid4().hex, token_sha256=hash_token(token), project=f"worker:{run.id}"))
    return number, token
