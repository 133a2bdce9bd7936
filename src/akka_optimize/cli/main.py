"""Entry points ``akka-optimize`` and ``akka``.

``akka optimize …`` is the same command tree as ``akka-optimize …``, and so is ``akka …``
itself (``akka training …``, the spelling of the 0.8 examples, and ``akka registry …``;
FEATURES.md F137). Help texts may contain ``{prog}``, replaced by the command as it was
run, and hints name commands under that same spelling. A command 0.8 removed answers
with the one that replaced it (:mod:`akka_optimize.cli.removed`).
"""

from __future__ import annotations

import sys

import typer

from . import (
    adapters,
    base_models,
    comparisons,
    data,
    endpoints,
    evaluations,
    pipelines,
    plan,
    projects,
    recipes,
    server,
    training,
)
from .context import CliError, set_prog
from .registry import commands as registry
from .removed import removed_hint
from .runs import lineage as run_lineage
from .runs import reading as run_commands
from .runs import start as runs
from .runs import states as run_states

RUNS_COMMANDS = (runs, run_commands, run_lineage, run_states)
"""The modules that add ``training runs`` commands to ``runs.app``; they are imported in this
(alphabetical) order, which is the order ``training runs --help`` lists the commands."""

app = typer.Typer(
    name="akka-optimize",
    help="Post-train language models: register data, run a plan, serve the adapter.\n\n"
    "Example: {prog} training info",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
training_app = training.app
training_app.add_typer(runs.app, name="runs")
training_app.add_typer(projects.app, name="projects")
training_app.add_typer(base_models.app, name="base-models")
training_app.add_typer(endpoints.app, name="endpoints")
training_app.add_typer(evaluations.app, name="evaluations")
training_app.add_typer(comparisons.app, name="comparisons")
training_app.add_typer(pipelines.curations_app, name="curations")
training_app.add_typer(pipelines.pipelines_app, name="pipelines")
training_app.add_typer(data.app, name="data")
training_app.add_typer(run_states.snapshots_app, name="snapshots")
training_app.add_typer(adapters.app, name="adapters")
training_app.add_typer(recipes.app, name="recipes")
app.add_typer(training_app, name="training")
app.add_typer(registry.app, name="registry")
app.add_typer(server.app, name="server")
app.command("login")(server.login)
app.command("config-schema")(plan.config_schema)

akka = typer.Typer(
    name="akka",
    help="The Akka CLI. `{prog} optimize …` trains and serves models; `{prog} registry …` "
    "reads and writes the artifact registry.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
akka.add_typer(app, name="optimize")
akka.add_typer(training_app, name="training")
akka.add_typer(registry.app, name="registry")
akka.add_typer(server.app, name="server")
akka.command("login")(server.login)
akka.command("config-schema")(plan.config_schema)


def _substitute(cmd: object, prog_name: str) -> None:
    for attr in ("help", "epilog", "short_help"):
        v = getattr(cmd, attr, None)
        if isinstance(v, str) and "{prog}" in v:
            setattr(cmd, attr, v.replace("{prog}", prog_name))
    for sub in (getattr(cmd, "commands", None) or {}).values():
        _substitute(sub, prog_name)


def _click_exit(exc: Exception) -> None:
    """Exit as click would for its own exceptions (usage errors: 2, no traceback); re-raise
    anything else. Matched by class name because typer vendors a copy of click."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "Exit" in names:
        sys.exit(getattr(exc, "exit_code", 0))
    if "Abort" in names:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    if "ClickException" in names:
        exc.show()  # type: ignore[attr-defined]
        sys.exit(2 if "UsageError" in names else 1)
    raise exc


def _run(tree: typer.Typer, root: str, prog_name: str) -> None:
    set_prog(prog_name)
    args = sys.argv[1:]
    hint = removed_hint(args[1:] if prog_name == "akka optimize" else args, prog_name)
    if hint is not None:
        print(f"Error: {hint}", file=sys.stderr)
        sys.exit(2)
    cmd = typer.main.get_command(tree)
    _substitute(cmd, prog_name)
    try:
        rv = cmd.main(args=sys.argv[1:], prog_name=root, standalone_mode=False)
    except CliError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except Exception as exc:  # click's exceptions (typer vendors its own click)
        _click_exit(exc)
    sys.exit(rv if isinstance(rv, int) else 0)


def main() -> None:
    """``akka-optimize``."""
    _run(app, "akka-optimize", "akka-optimize")


def akka_main() -> None:
    """``akka``: ``akka optimize …`` prints hints as ``akka optimize``; ``akka training …``
    and ``akka registry …`` print them as ``akka``."""
    is_optimize = len(sys.argv) > 1 and sys.argv[1] == "optimize"
    _run(akka, "akka", "akka optimize" if is_optimize else "akka")
