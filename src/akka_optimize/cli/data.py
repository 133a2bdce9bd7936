"""``training data``: see rows as the base model's chat template renders them.

``training data preview`` prints each row rendered with the supervised spans (the tokens
the loss covers) highlighted, using a plan's loss policy when given; ``-o json`` gives, per
row, a list of segments ``{"text", "supervised"}`` and token counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from .client import Client
from .context import CliError
from .output import OutputOpt, console, emit

app = typer.Typer(
    help="Training data: preview rows as the base model renders them.", no_args_is_help=True
)

OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧ mark supervised text when the output is not a terminal


def _read_plan(path: Path) -> dict[str, Any]:
    try:
        plan = json.loads(path.read_text())
    except FileNotFoundError:
        raise CliError(f"--plan: {path} does not exist.", exit_code=2) from None
    except json.JSONDecodeError as exc:
        raise CliError(f"--plan: {path} is not JSON ({exc}).", exit_code=2) from None
    if not isinstance(plan, dict):
        raise CliError(f"--plan: {path} must hold a run plan object.", exit_code=2)
    return plan


def _print_rows(data: dict[str, Any], wide: bool) -> None:
    loss = data["loss"]
    console.print(
        f"{data['source']} rendered by {data['baseModel']}'s chat template; loss: "
        f"assistantTurns={loss['assistantTurns']} trainOnToolCalls={str(loss['trainOnToolCalls']).lower()} "
        f"trainOnToolResults={str(loss['trainOnToolResults']).lower()}",
        highlight=False,
        markup=False,
    )
    tty = console.is_terminal
    if not tty:
        console.print(
            f"Supervised text is between {OPEN} and {CLOSE}.", highlight=False, markup=False
        )
    for r in data["rows"]:
        console.print()
        if "error" in r:
            console.print(f"row {r['row']}: refused: {r['error']}", highlight=False, markup=False)
            continue
        console.print(
            f"row {r['row']}: {r['tokens']} tokens, {r['supervised_tokens']} supervised",
            highlight=False,
            markup=False,
        )
        text = Text()
        for seg in r["segments"]:
            if seg["supervised"]:
                text.append(
                    seg["text"] if tty else f"{OPEN}{seg['text']}{CLOSE}",
                    style="bold green" if tty else "",
                )
            else:
                text.append(seg["text"], style="dim" if tty else "")
        console.print(text, highlight=False)
        for w in r.get("warnings", []):
            console.print(f"warning: {w}", highlight=False, markup=False)


def _first_rows(file: Path, count: int) -> str:
    """The file's text up to its ``count``-th non-blank line (the service previews no more,
    and a JSON body has a size limit, ``service.jsonBodyBytes``). Lines end at ``\n``."""
    out: list[str] = []
    seen = 0
    with open(file, encoding="utf-8", newline="") as f:
        for line in f:
            out.append(line)
            seen += bool(line.strip())
            if seen >= count:
                break
    return "".join(out)


@app.command("preview")
def preview(
    base_model: Annotated[
        str | None,
        typer.Option("--base-model", help="The base model whose chat template renders the rows."),
    ] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="A JSONL file of rows.")] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="A registered dataset, NS/NAME[:tag].")
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="A run plan file; its config.loss is the loss policy."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Resolves a bare dataset NAME.")
    ] = None,
    rows: Annotated[int, typer.Option("--rows", help="How many rows to show, from the start.")] = 5,
    output: OutputOpt = "text",
) -> None:
    """Show rows rendered by the base model's chat template, supervised spans highlighted.

    Example: {prog} training data preview -f train.jsonl --base-model HuggingFaceTB/SmolLM2-135M-Instruct
    """
    if (file is None) == (dataset is None):
        raise CliError("Give exactly one of -f/--file or --dataset.", exit_code=2)
    body: dict[str, Any] = {"rowCount": rows}
    if base_model:
        body["baseModel"] = base_model
    if plan is not None:
        body["plan"] = _read_plan(plan)
    if project:
        body["project"] = project
    if file is not None:
        try:
            body["jsonl"] = _first_rows(file, rows)
        except (FileNotFoundError, IsADirectoryError):
            raise CliError(f"-f: {file} is not a readable file.", exit_code=2) from None
        except UnicodeDecodeError:
            raise CliError(f"-f: {file} is not UTF-8 text.", exit_code=2) from None
        body["filename"] = file.name
    else:
        body["dataset"] = dataset
    if "baseModel" not in body and "baseModel" not in body.get("plan", {}):
        raise CliError("Give --base-model (or a --plan that names baseModel).", exit_code=2)
    data = Client("trainer").post("/v1/training/data/preview", json=body)
    emit(data, output, _print_rows)
