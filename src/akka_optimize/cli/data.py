"""``data`` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="data.", no_args_is_help=True)
