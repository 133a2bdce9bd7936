"""``training base-models`` commands: list, select, wait, candidates (seeds/000 "Base model
flexibility", seeds/001 "Base model listing"). A thin client of
``/v1/training/base-models``.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, check_format, console, emit, print_table, wait_for

app = typer.Typer(
    help="Base models the deployment's catalog allows: select one to register it and warm "
    "its weights.\n\nExample: {prog} training base-models select "
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    no_args_is_help=True,
)

ROUTE = "/v1/training/base-models"
TimeoutOpt = Annotated[
    float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")
]


def _get(ref: str) -> dict[str, Any]:
    return Client().get(f"{ROUTE}/{quote(ref.strip(), safe='/:@')}")


def _state_text(m: dict[str, Any]) -> str:
    return m["state"] if m.get("state") else "not selected"


def _short_model(model: str) -> str:
    """``repository@commit`` with the commit cut to 12 digits, as git shows commits."""
    repo, at, commit = model.partition("@")
    return f"{repo}@{commit[:12]}" if at else model


def _print_list(data: dict[str, Any], wide: bool) -> None:
    rows = data["baseModels"]
    for m in rows:
        m["modelText"] = m["model"] if wide else _short_model(m["model"])
        m["stateText"] = m["state"] if m.get("state") else "not selected"
        m["cachedText"] = "yes" if m.get("cached") else "no"
        m["defaultText"] = "yes" if m.get("default") else ""
    cols = [("MODEL", "modelText"), ("STATE", "stateText"), ("CACHED", "cachedText")]
    if wide:
        cols += [
            ("FAMILY", "family"),
            ("REPOSITORY", "repository"),
            ("DEFAULT", "defaultText"),
            ("SOURCE", "source"),
            ("ID", "id"),
            ("WEIGHTS", "weightsPath"),
        ]
    print_table(rows, cols)
    for m in rows:
        if m.get("state") == "FAILED" and m.get("error"):
            console.print(f"{m['repository']} failed: {m['error']}", highlight=False, markup=False)
    if not rows:
        console.print(
            f"Select one with `{prog()} training base-models select REPOSITORY`; "
            f"`{prog()} training base-models list --all` shows the catalog.",
            highlight=False,
            markup=False,
        )


@app.command("list")
def list_cmd(
    all_: Annotated[
        bool, typer.Option("--all", help="Every model the catalog allows, selected or not.")
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Selected base models by registered version; with --all every catalog entry
    (unselected ones as repository@commit).

    Example: {prog} training base-models list --all
    """
    check_format(output)
    data = Client().get(ROUTE, params={"all": "true" if all_ else "false"})
    emit(data, output, _print_list)


def _ready_line(m: dict[str, Any]) -> str:
    cached = f"weights cached in {m['weightsPath']}" if m.get("cached") else "weights not cached"
    return f"{m['repository']} is READY as {m['model']}; {cached}."


def _wait(ref: str, output: str, timeout: float | None) -> None:
    last: dict[str, Any] = {}

    def poll() -> tuple[bool, str]:
        m = _get(ref)
        last.clear()
        last.update(m)
        state = m.get("state")
        if state is None:
            raise CliError(
                f"{m['repository']} is not selected; select it with "
                f"`{prog()} training base-models select {m['repository']} --wait`."
            )
        if state == "READY":
            return True, _ready_line(m)
        if state == "FAILED":
            return True, f"{m['repository']} FAILED"
        return False, f"{m['repository']}: {state}" + (
            f" — {m['progress']}" if m.get("progress") else ""
        )

    if output == "json":
        import time

        start = time.monotonic()
        while not poll()[0]:
            if timeout and time.monotonic() - start > timeout:
                raise CliError(f"Gave up waiting after {timeout:.0f}s for {ref}.")
            time.sleep(1.0)
    else:
        wait_for(poll, interval=1.0, timeout=timeout)
        if last.get("state") == "READY":
            console.print(_ready_line(last), highlight=False, markup=False)
    if last.get("state") == "FAILED":
        if output == "json":
            emit(last, output, lambda *_: None)
        raise CliError(f"{last['repository']} failed: {last.get('error')}")
    if output == "json":
        emit(last, output, lambda *_: None)


@app.command("select")
def select_cmd(
    repository: Annotated[str, typer.Argument(help="Hub repository in the catalog.")],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Return when the weights are cached (READY; the default), or at once with "
            "the selection's state (--no-wait; `base-models wait` waits later).",
        ),
    ] = True,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Select a base model: register it and warm its weights in the shared cache. Returns
    when the weights are cached (READY), reporting where, or exits 1 with the reason the
    fetch failed (seeds/000: "select returns when the weights are cached"); --no-wait
    returns at once.

    Example: {prog} training base-models select google/gemma-4-E4B-it
    """
    check_format(output)
    m = Client().post(ROUTE, json={"repository": repository})
    if wait:
        _wait(m["repository"], output, timeout)
        return

    def text(m: dict[str, Any], _wide: bool) -> None:
        if m["state"] == "READY":
            line = _ready_line(m)
        else:
            line = (
                f"Selected {m['repository']}: {m['state']}. Wait for its weights with "
                f"`{prog()} training base-models wait {m['repository']}`."
            )
        console.print(line, highlight=False, markup=False)

    emit(m, output, text)


@app.command("wait")
def wait_cmd(
    repository: Annotated[
        str, typer.Argument(help="Repository, registered version or selection ID prefix.")
    ],
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Wait until a selection is READY and report whether its weights are cached; exit 1
    with the reason when it failed.

    Example: {prog} training base-models wait HuggingFaceTB/SmolLM2-135M-Instruct
    """
    check_format(output)
    _wait(repository, output, timeout)


@app.command("candidates")
def candidates_cmd(
    author: Annotated[str, typer.Option("--author", help="Hub publisher, such as google.")],
    match: Annotated[
        str, typer.Option("--match", help="Glob on repository names, such as 'gemma-4-*'.")
    ] = "*",
    catalog: Annotated[
        bool,
        typer.Option("--catalog", help="Print catalog entries to paste into the deployment."),
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """A publisher's hub repositories and the catalog's verdict on each.

    Example: {prog} training base-models candidates --author google --match 'gemma-4-*'
    """
    check_format(output)
    data = Client(timeout=120).get(f"{ROUTE}/candidates", params={"author": author, "match": match})

    def text(d: dict[str, Any], _wide: bool) -> None:
        if catalog:
            if not d["catalogYaml"]:
                console.print(
                    "# No supported repository outside the catalog matches.", markup=False
                )
                return
            print("# Paste under `catalog:` in the deployment file, after `- include: shipped`")
            print("# to keep the shipped entries. Envelopes are estimates (measured: false).")
            print(d["catalogYaml"], end="")
            return
        print_table(
            d["candidates"],
            [
                ("REPOSITORY", "repository"),
                ("VERDICT", "verdict"),
                ("MODEL TYPE", "modelType"),
                ("REASON", "reason"),
            ],
        )

    emit(data, output, text)
