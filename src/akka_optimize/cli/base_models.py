"""``base-models`` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="base-models.", no_args_is_help=True)
