"""``training projects``: create, list and read training projects (seeds/001 "Workloads
are training projects"). A project's name cannot change; there is no rename. Text output
names a project by its name; ``-o json`` keeps its ID."""

from __future__ import annotations

from typing import Any

import typer

from .client import Client
from .output import OutputOpt, emit, print_kv, print_table

app = typer.Typer(
    help="Training projects: the namespace of a task's runs and models.\n\n"
    "Example: {prog} training projects create triage",
    no_args_is_help=True,
)


def _text_one(p: dict[str, Any], wide: bool) -> None:
    pairs = [("Name", p["name"]), ("Created", p.get("createdAt"))]
    if wide:
        pairs.append(("ID", p["id"]))
    print_kv(pairs)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The project's name; it cannot change."),
    output: OutputOpt = "text",
) -> None:
    """Create a training project.

    Example: {prog} training projects create triage
    """
    p = Client("trainer").post("/v1/training/projects", json={"name": name})

    def text(d: dict[str, Any], wide: bool) -> None:
        print(f"Created training project {d['name']}.")
        if wide:
            _text_one(d, wide)

    emit(p, output, text)


@app.command("list")
def list_(output: OutputOpt = "text") -> None:
    """List training projects.

    Example: {prog} training projects list
    """
    data = Client("trainer").get("/v1/training/projects")

    def text(d: dict[str, Any], wide: bool) -> None:
        cols = [("NAME", "name"), ("CREATED", "createdAt")] + ([("ID", "id")] if wide else [])
        print_table(d["projects"], cols)

    emit(data, output, text)


@app.command("get")
def get(
    project: str = typer.Argument(..., help="Project name (or ID)."), output: OutputOpt = "text"
) -> None:
    """Show one training project.

    Example: {prog} training projects get triage
    """
    emit(Client("trainer").get(f"/v1/training/projects/{project}"), output, _text_one)
