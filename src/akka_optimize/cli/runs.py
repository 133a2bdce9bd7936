"""``runs`` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="runs.", no_args_is_help=True)
