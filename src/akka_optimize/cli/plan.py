"""``config-schema``: the plan reference (filled by the run-plan issue)."""

from __future__ import annotations

import typer

from .context import CliError


def config_schema(
    field: str | None = typer.Option(
        None, "--field", help="Show one field, e.g. config.maxSeqLength."
    ),
    format: str = typer.Option("json", "--format", help="json or yaml."),
) -> None:
    """Print the run plan's JSON schema with descriptions, defaults and bounds.

    Example: {prog} config-schema --field config.hyperparams.lora.rank
    """
    raise CliError("config-schema is not available in this build yet.")
