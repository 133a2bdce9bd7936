"""``projects`` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="projects.", no_args_is_help=True)
