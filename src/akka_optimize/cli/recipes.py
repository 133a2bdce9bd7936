"""``training recipes submit``: queue a minifield recipe run for a supervised worker
(``minifield-worker supervise``; README "minifield-worker", supervised mode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, emit, print_kv

app = typer.Typer(help="minifield recipe runs claimed by supervised workers.", no_args_is_help=True)


def read_recipe_file(path: Path) -> dict[str, Any]:
    """The recipe in ``path`` with relative ``model.path`` / ``data.path`` made absolute
    against the recipe's folder (the service and the workers read absolute paths).

    Raises:
        CliError: the file cannot be read, or is not a JSON object.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"Recipe {path} cannot be read as JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError(f"Recipe {path} must hold a JSON object.")
    for part in ("model", "data"):
        ref = doc.get(part)
        if isinstance(ref, dict) and isinstance(ref.get("path"), str):
            p = Path(ref["path"]).expanduser()
            doc[part] = {**ref, "path": str(p if p.is_absolute() else path.parent.resolve() / p)}
    return doc


@app.command("submit")
def submit(
    recipe: Path = typer.Argument(..., help="The recipe JSON file."),
    project: str = typer.Option(..., "--project", "-p", help="The training project."),
    output: OutputOpt = "text",
) -> None:
    """Queue a recipe run; a `minifield-worker supervise` that accepts its computation
    claims it. The recipe is checked as `minifield-worker run` checks it.

    Example: {prog} training recipes submit recipe.json --project demo
    """
    doc = read_recipe_file(recipe)
    run = Client().post("/v1/training/recipes", json={"project": project, "recipe": doc})

    def text(d: dict, wide: bool) -> None:
        c = d.get("recipe") or {}
        print_kv(
            [
                ("Run", d["id"]),
                ("Project", d["project"]),
                ("State", d["state"]),
                ("Computation", f"{c.get('strategy')} {c.get('computation')}"),
                ("Identity", c.get("computationIdentity")),
                ("Updates", c.get("updates")),
                ("Queue reason", d.get("queueReason")),
            ]
        )
        print(f"Follow it with `{prog()} training runs get {d['id']}`.")

    emit(run, output, text)
