"""``training adapters import NS/NAME --base BASE_MODEL -d DIR`` and ``training adapters get
IMPORT_ID`` (F118, seeds/001 "Other changes"; issue 54 item 6): bring a PEFT adapter
trained elsewhere into the registry, and follow the import.

The service checks the adapter against the base model before it registers anything
(:mod:`akka_optimize.registry.adapter_checks`: tensor names and shapes, target modules,
rank at most the serving engine's, no DoRA, ``modules_to_save``, ``lm_head`` or
embeddings); a refused import says why and registers nothing. ``import`` prints the
import's ID as soon as the upload is received, then waits for its outcome (the registered
version, or exit 1 with the reason) unless ``--no-wait``; ``get`` shows an import's
stages and outcome at any time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, check_format, console, emit, wait_for
from .registry.commands import (
    AliasOpt,
    TimeoutOpt,
    registry_path,
    registry_transfer_ref,
    show_version,
    tar_dir,
    upload,
)

app = typer.Typer(
    help="Adapters trained elsewhere: import a PEFT folder, follow an import.",
    no_args_is_help=True,
)
ROUTE = "/v1/registry/adapter-imports"


def _get(import_id: str) -> dict[str, Any]:
    return Client("registry").get(f"{ROUTE}/{import_id.strip()}")


def _line(d: dict[str, Any]) -> str:
    """One line of an import's state: its stage under way, or its outcome."""
    if d["state"] == "CHECKING":
        return (
            f"import {d['id'][:8]} CHECKING ({d['stagesDone']}/{d['stagesTotal']}): {d['progress']}"
        )
    if d["state"] == "REGISTERED":
        return f"import {d['id'][:8]} REGISTERED as {d['model']}"
    return f"import {d['id'][:8]} FAILED: {d['error']}"


def _show(d: dict[str, Any], _wide: bool) -> None:
    pairs = [
        ("import", d["id"]),
        ("name", d["name"]),
        ("base model", d["baseModel"]),
        ("state", d["state"]),
        ("stages", f"{d['stagesDone']}/{d['stagesTotal']}"),
        ("progress", d["progress"]),
        ("model", d.get("model")),
        ("error", d.get("error")),
    ]
    for key, value in pairs:
        if value is not None:
            console.print(f"{key:<11} {value}", highlight=False, markup=False)


@app.command("import")
def import_adapter(
    name: Annotated[str, typer.Argument(help="NS/NAME to register it under, e.g. triage/ext")],
    base: Annotated[
        str, typer.Option("--base", help="The base model it was trained on, e.g. Qwen/Qwen3-0.6B.")
    ],
    folder: Annotated[
        Path, typer.Option("-d", "--dir", help="The PEFT adapter folder (adapter_config.json).")
    ],
    alias: AliasOpt = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Wait for the import's outcome (the default), or print its ID and return "
            "(follow it with `training adapters get IMPORT_ID`).",
        ),
    ] = True,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Upload a PEFT adapter folder, print the import's ID, and wait until it is checked
    against its base model and registered (or refused, exit 1 with the reason).

    Example: {prog} training adapters import triage/ext --base akka-optimize/tiny-smollm2 -d ./adapter
    """
    check_format(output)
    r = registry_transfer_ref(name, bare=True)
    params = {"baseModel": base, "alias": alias}
    with tempfile.TemporaryDirectory() as tmp:
        archive = tar_dir(folder, Path(tmp) / "adapter.tar.gz")
        started = upload(f"{ROUTE}/{r.namespace}/{r.name}", archive, params, timeout)
    iid = started["id"]
    print(
        f"Import {iid} {started['state']}; `{prog()} training adapters get {iid[:8]}` shows it.",
        file=sys.stderr,
        flush=True,
    )
    if not wait:
        emit(started, output, _show)
        return
    last: dict[str, Any] = {}

    def poll() -> tuple[bool, str]:
        last.clear()
        last.update(_get(iid))
        return last["state"] != "CHECKING", _line(last)

    wait_for(poll, interval=0.5, timeout=None)
    if last["state"] == "FAILED":
        if output == "json":
            emit(last, output, _show)
        raise CliError(f"The import {iid[:8]} was refused; nothing was registered: {last['error']}")
    if output == "json":
        emit(last, output, _show)
        return
    model = Client("registry").get(registry_path("model", registry_transfer_ref(last["model"])))
    show_version(model, output == "wide")


@app.command("get")
def get_import(
    import_id: Annotated[str, typer.Argument(help="The import's ID or an unambiguous prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Show an import: the stages done, the one under way, and its outcome (the registered
    version, or why it was refused).

    Example: {prog} training adapters get 3f2a9c1e
    """
    check_format(output)
    emit(_get(import_id), output, _show)
