"""The service's runtime: built once, started once, stopped once (issue 49 item 2).

:func:`build_context` makes the typed :class:`~akka_optimize.core.context.ServiceContext`
(settings, state store, blob store, development secret) and registers every job kind
(:mod:`akka_optimize.core.job_kinds`); :func:`akka_optimize.service.app.create_app`
calls it. :func:`start` runs at start-up, after the migrations and every router's own
``on_startup`` hook (fetches and endpoints of an earlier process are settled first): it
publishes the service's address for workers, builds the executor the deployment names (run
attempts and serving workers are launched with it), recovers the runs an earlier process
left, and starts the scheduler. :func:`stop` stops the scheduler at shutdown and
:func:`close`, after the routers' shutdown hooks, the fork server and the state store. A process
that runs the scheduler without serving the API calls ``start(build_context(settings))``
after the migrations.
"""

from __future__ import annotations

from ..core import job_kinds
from ..core.context import ServiceContext
from ..db import Database
from ..devtoken import ensure_dev_secret
from ..jobs.address import publish_address
from ..jobs.executor import make_executor
from ..jobs.recovery import recover
from ..jobs.scheduler import Scheduler
from ..settings import Settings
from ..store import BlobStore


def build_context(settings: Settings) -> ServiceContext:
    """The context of one service over ``settings``' state and blob stores; registers
    every job kind of :data:`~akka_optimize.core.job_kinds.KINDS`. Creates the home
    folder (mode 0700) and its development secret when missing. Nothing is started."""
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    ctx = ServiceContext(
        settings=settings,
        db=Database(settings.database_url or ""),
        store=BlobStore(settings.blobs_url or ""),
        dev_secret=ensure_dev_secret(settings.home),
    )
    job_kinds.install()
    return ctx


def start(ctx: ServiceContext) -> None:
    """Publish the address, build the executor, recover runs and start the scheduler.

    Raises:
        AkkaError: the deployment file cannot be read (start-up reports the sentence).
    """
    if ctx.base_url:  # for workers (akka_optimize.jobs.address)
        publish_address(ctx.store, ctx.base_url)
    dep = ctx.deployment()
    ctx.executor = make_executor(
        dep.executor, ctx.forker
    )  # endpoints place their workers with it too
    recover(ctx)
    ctx.scheduler = Scheduler(ctx, ctx.executor)
    ctx.scheduler.start()


def stop(ctx: ServiceContext) -> None:
    """Stop the scheduler (its thread ends after the pass it is in)."""
    if ctx.scheduler is not None:
        ctx.scheduler.stop()


def close(ctx: ServiceContext) -> None:
    """Release what the runtime holds once the routers' shutdown hooks have stopped the
    endpoints: the fork server ends (workers it forked keep running, as a worker of an
    earlier service process does) and the state store's connections close."""
    ctx.forker.stop()
    ctx.db.dispose()
