"""``config-schema``: the run plan's reference, generated from the schema the service
validates with (:mod:`akka_optimize.plan.reference`): descriptions, defaults per loop,
bounds and every engine setting."""

from __future__ import annotations

import json
import sys

import typer
import yaml

from ..plan.reference import KINDS, descriptor_schema, field_schema
from .context import CliError


def config_schema(
    field: str | None = typer.Option(
        None, "--field", help="Show one field, e.g. config.maxSeqLength."
    ),
    format: str = typer.Option("json", "--format", help="json or yaml."),
    kind: str = typer.Option(
        "run",
        "--kind",
        help="run (a run descriptor), pipeline (a pipeline descriptor and its curate, train "
        "and evaluate stages), curation (training curations start) or evaluation (training "
        "evaluations start).",
    ),
) -> None:
    """Print a descriptor's JSON schema with descriptions, defaults and bounds.

    Example: {prog} config-schema --field config.hyperparams.lora.rank
    Example: {prog} config-schema --kind pipeline
    """
    if format not in ("json", "yaml"):
        raise CliError(f"--format must be json or yaml, not {format!r}.", exit_code=2)
    try:
        if kind not in KINDS:
            raise KeyError(f"--kind {kind!r}: the kinds are {', '.join(KINDS)}")
        schema = field_schema(field, kind) if field else descriptor_schema(kind)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from exc
    if format == "yaml":
        sys.stdout.write(yaml.safe_dump(schema, sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(json.dumps(schema, indent=2) + "\n")
