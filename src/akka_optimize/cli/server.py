"""``server start``, ``server token create`` and ``login``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from ..devtoken import ensure_dev_secret, mint_dev_token
from ..errors import AkkaError
from ..settings import Settings
from .client import save_login, service_url
from .context import CliError
from .output import OutputOpt, emit, print_table

app = typer.Typer(help="Run the service and manage its tokens.", no_args_is_help=True)
token_app = typer.Typer(help="Issue, list and revoke API tokens (run beside the server's home).")
app.add_typer(token_app, name="token")


@app.command("start")
def start(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9001,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    workers: Annotated[
        int | None,
        typer.Option(
            help="API processes answering on the port (default: the machine's cores). "
            "With more than 1, one more process, the controller, runs the scheduler, "
            "executors, endpoints and Tinker sessions; 1 runs everything in one process."
        ),
    ] = None,
) -> None:
    """Start the trainer and registry service (FastAPI on uvicorn).

    State lives in $AKKA_OPTIMIZE_HOME (default ~/.akka-optimize). With --workers N > 1
    the service runs N API processes over the same store and one controller process,
    started again if it dies (README "Several API processes").

    Example: {prog} server start --port 9001 --workers 4
    """
    import os

    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise CliError(f"--workers: {n} is not a process count; give 1 or more.", exit_code=2)
    if n > 1:
        _start_workers(host, port, n, log_level)
        return
    import uvicorn

    from ..service import create_app  # lazy: torch
    from ..service.connections import protocol_class  # lazy: uvicorn

    # Everything the service creates (home, state.db, blobs, logs) is private to
    # its user: folders 0700, files 0600.
    os.umask(0o077)
    settings = Settings.from_env()
    app_ = create_app(settings)
    app_.state.ctx.base_url = f"http://{host}:{port}"
    print(dashboard_lines(host, port, app_.state.ctx.dev_secret), flush=True)
    uvicorn.run(
        app_,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol_class(),
        timeout_keep_alive=5,
    )


def _start_workers(host: str, port: int, workers: int, log_level: str) -> None:
    """``server start --workers N`` with N > 1 (:mod:`akka_optimize.service.supervisor`)."""
    import os

    from ..service.supervisor import serve  # lazy: starlette

    os.umask(0o077)
    settings = Settings.from_env()
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    print(dashboard_lines(host, port, ensure_dev_secret(settings.home)), flush=True)
    print(f"{workers} API processes and one controller process.", flush=True)
    try:
        code = serve(host, port, workers, log_level)
    except OSError as exc:
        raise CliError(f"--port: cannot listen on {host}:{port} ({exc.strerror}).") from exc
    if code:
        raise typer.Exit(code)


def dashboard_lines(host: str, port: int, dev_secret: bytes) -> str:
    """Where the dashboard is; on a loopback address also a login link carrying the
    development token in its ``#fragment`` (browsers never send a fragment, so the token
    reaches no request log; whoever reads this output could read the secret anyway)."""

    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    lines = [f"Dashboard: http://{shown}:{port}/ui/"]
    if host in ("127.0.0.1", "localhost", "::1"):
        token = mint_dev_token(dev_secret)
        lines.append(f"Log in on this machine: http://{shown}:{port}/ui/login#token={token}")
    return "\n".join(lines)


@contextmanager
def _home_db() -> Iterator[Any]:
    """The state store of $AKKA_OPTIMIZE_HOME (migrated); a refusal becomes a CLI error."""
    from ..db import Database  # lazy: sqlalchemy
    from ..db.migrate import upgrade  # lazy: sqlalchemy

    settings = Settings.from_env()
    settings.ensure_dirs()
    upgrade(settings.database_url or "")
    db = Database(settings.database_url or "")
    try:
        yield db
    except AkkaError as exc:
        raise CliError(exc.message) from exc
    finally:
        db.dispose()


@token_app.command("create")
def token_create(
    project: Annotated[
        str | None,
        typer.Option(help="The one training project (name or ID) the token acts in."),
    ] = None,
    tinker: Annotated[
        bool,
        typer.Option(
            "--tinker",
            help="Issue a tml- key for the Tinker SDK (TINKER_API_KEY; see the README).",
        ),
    ] = False,
) -> None:
    """Issue a token for the service whose home is $AKKA_OPTIMIZE_HOME; prints it once.

    Without --project the token is an admin token (every project). The project must
    exist. The token goes to standard output; its ID (for `server token revoke`) to
    standard error.

    Example: {prog} server token create --project triage --tinker
    """
    from ..core.auth import issue_token_row  # lazy: sqlalchemy

    with _home_db() as db:
        token, row = issue_token_row(db, project, tinker=tinker)
    print(token)
    print(f"Token {row['id']} ({row['scope']}); revoke it with `server token revoke "
          f"{row['id'][:8]}`.", file=sys.stderr)  # fmt: skip


@token_app.command("list")
def token_list(output: OutputOpt = "text") -> None:
    """List issued tokens: ID, scope, when created and revoked (never the token itself).

    Example: {prog} server token list
    """
    from ..core.auth import list_tokens  # lazy: sqlalchemy

    with _home_db() as db:
        rows = list_tokens(db)

    def text(d: list[dict[str, Any]], wide: bool) -> None:
        cols = [("ID", "id"), ("SCOPE", "scope"), ("CREATED", "createdAt")]
        print_table(d, cols + [("REVOKED", "revokedAt")])

    emit(rows, output, text)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's ID or an unambiguous prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Revoke a token: every request carrying it is refused (401) from now on.

    Example: {prog} server token revoke 3f2a9c1e
    """
    from ..core.auth import revoke_token  # lazy: sqlalchemy

    with _home_db() as db:
        row = revoke_token(db, token_id)
    emit(row, output, lambda d, _w: print(f"Revoked token {d['id']} ({d['scope']})."))


def login(
    token: Annotated[str, typer.Option(help="The bearer token to save.")],
    url: Annotated[str | None, typer.Option(help="The service address.")] = None,
) -> None:
    """Save a token for a service address (default: $AKKA_OPTIMIZE_URL or localhost:9001).

    Example: {prog} login --token ak_… --url https://optimize.example.com
    """
    if not token.strip():
        raise CliError("--token is empty.", exit_code=2)
    target = url or service_url("trainer")
    path = save_login(target, token.strip())
    print(f"Saved a token for {target} in {path}.")
