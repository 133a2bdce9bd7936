"""``server start``, ``server token create`` and ``login``."""

from __future__ import annotations

from typing import Annotated

import typer

from .client import save_login, service_url
from .context import CliError

app = typer.Typer(help="Run the service and manage its tokens.", no_args_is_help=True)
token_app = typer.Typer(help="Issue API tokens (run beside the server's home).")
app.add_typer(token_app, name="token")


@app.command("start")
def start(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9001,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Start the trainer and registry service (FastAPI on uvicorn).

    State lives in $AKKA_OPTIMIZE_HOME (default ~/.akka-optimize).

    Example: {prog} server start --port 9001
    """
    import os

    import uvicorn

    from ..service import create_app
    from ..service.connections import protocol_class
    from ..settings import Settings

    # Everything the service creates (home, state.db, blobs, logs) is private to
    # its user: folders 0700, files 0600.
    os.umask(0o077)
    settings = Settings.from_env()
    app_ = create_app(settings)
    app_.state.ctx.base_url = f"http://{host}:{port}"
    uvicorn.run(
        app_,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol_class(),
        timeout_keep_alive=5,
    )


@token_app.command("create")
def token_create(
    project: Annotated[str | None, typer.Option(help="Scope the token to a project.")] = None,
) -> None:
    """Issue a token for the service whose home is $AKKA_OPTIMIZE_HOME; prints it once.

    Example: {prog} server token create --project triage
    """
    from ..db import Database
    from ..db.migrate import upgrade
    from ..service.auth import issue_token
    from ..settings import Settings

    settings = Settings.from_env()
    settings.ensure_dirs()
    upgrade(settings.database_url or "")
    db = Database(settings.database_url or "")
    try:
        print(issue_token(db, project))
    finally:
        db.dispose()


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
