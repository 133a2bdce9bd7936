"""``training`` group: ``training info`` and the sub-groups added in main.py."""

from __future__ import annotations

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, emit, print_kv

app = typer.Typer(help="Training: runs, projects, base models, endpoints.", no_args_is_help=True)


@app.command("info")
def info(output: OutputOpt = "text") -> None:
    """Show the trainer's build, stores and whether it started completely.

    Exits non-zero until the service has started completely.

    Example: {prog} training info -o json
    """
    data = Client("trainer").get("/v1/training/info")

    def text(d: dict, wide: bool) -> None:
        print_kv(
            [
                ("Version", d["version"]),
                ("State store", d["stateStore"]["url"]),
                ("Blob store", d["blobStore"]["url"]),
                ("Started completely", "yes" if d["startedCompletely"] else "no"),
            ]
            + ([("Start-up error", d["startupError"])] if d.get("startupError") else [])
        )

    emit(data, output, text)
    if not data.get("startedCompletely"):
        raise CliError(
            data.get("startupError")
            or f"The service has not started completely yet; run `{prog()} training info` again.",
        )
