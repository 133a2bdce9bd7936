"""A run's saves and state: ``training runs snapshots|failure|cancel|pause|resume`` and
``training snapshots get``."""

from __future__ import annotations

from typing import Annotated

import typer

from ..client import Client
from ..context import CliError, prog
from ..output import OutputOpt, console, emit, print_kv, print_table
from .follow import progress_line, wait_for_run
from .start import app

snapshots_app = typer.Typer(help="Saved snapshots of runs.", no_args_is_help=True)


def _print_snapshots(d: dict, wide: bool) -> None:
    rows = [
        {
            **s,
            "size": s["bytes"]["total"],
            "end": "yes" if s["epochEnd"] else "",
            "resumable": "yes" if s["recoverable"] else "",
            "adapter": "yes" if s.get("hasAdapter") else "",
        }
        for s in d["snapshots"]
    ]
    print_table(
        rows,
        [
            ("NAME", "name"),
            ("EPOCH", "epoch"),
            ("EPOCH END", "end"),
            ("RESUMABLE", "resumable"),
            ("ADAPTER", "adapter"),
            ("BYTES", "size"),
            ("MODEL", "model"),
        ],
    )


@app.command("snapshots")
def snapshots(run_id: str, output: OutputOpt = "text") -> None:
    """List a run's saves, their sizes, and which ended an epoch.

    Example: {prog} training runs snapshots 970076e8
    """
    emit(Client().get(f"/v1/training/runs/{run_id}/snapshots"), output, _print_snapshots)


@snapshots_app.command("get")
def snapshot_get(run_id: str, snapshot: str, output: OutputOpt = "text") -> None:
    """Show one snapshot (``step-N``) of a run and its size.

    Example: {prog} training snapshots get 970076e8 step-40
    """
    d = Client().get(f"/v1/training/runs/{run_id}/snapshots/{snapshot}")
    emit(
        d,
        output,
        lambda s, w: print_kv(
            [
                ("Run", s["run"]),
                ("Snapshot", s["name"]),
                ("Epoch", s["epoch"]),
                ("Resumable", "yes" if s["recoverable"] else "no"),
                ("Adapter stored", "yes" if s.get("hasAdapter") else "no"),
                ("State bytes", s["bytes"]["state"]),
                ("Adapter bytes", s["bytes"]["adapter"]),
                ("Model", s["model"]),
            ]
        ),
    )


@app.command("failure")
def failure(run_id: str, output: OutputOpt = "text") -> None:
    """Why a run failed, in one sentence.

    Example: {prog} training runs failure 970076e8
    """
    d = Client().get(f"/v1/training/runs/{run_id}/failure")
    emit(
        d,
        output,
        lambda x, w: print_kv(
            [("Run", x["run"]), ("State", x["state"]), ("Reason", x["reason"] or "-")]
        ),
    )


def _control(run_id: str, action: str, output: str, body: dict | None = None) -> None:
    d = Client().post(f"/v1/training/runs/{run_id}/{action}", json=body)
    emit(d, output, lambda x, w: console.print(progress_line(x), highlight=False, markup=False))


@app.command("cancel")
def cancel(run_id: str, output: OutputOpt = "text") -> None:
    """Cancel a run; an active run stops at its next update.

    Example: {prog} training runs cancel 970076e8
    """
    _control(run_id, "cancel", output)


@app.command("pause")
def pause(run_id: str, output: OutputOpt = "text") -> None:
    """Pause a run: it saves at its next update and stops; resume it later.

    Example: {prog} training runs pause 970076e8
    """
    _control(run_id, "pause", output)


@app.command("resume")
def resume(
    run_id: str,
    output: OutputOpt = "text",
    step: Annotated[
        str | None, typer.Option(help="Resume from this kept save: step-N (or N).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end.")] = False,
) -> None:
    """Resume a paused or failed run from its newest kept save, or --step STEP.

    Example: {prog} training runs resume 970076e8 --step step-40
    """
    number = None
    if step is not None:
        text = step.removeprefix("step-")
        if not text.isdigit():
            raise CliError(
                f"--step {step!r} is not a snapshot; give step-N or N, as "
                f"`{prog()} training runs snapshots {run_id}` lists them."
            )
        number = int(text)
    _control(run_id, "resume", output, {"step": number} if number is not None else None)
    if wait:
        run = wait_for_run(Client(), run_id)
        if run["state"] != "SUCCEEDED":
            raise CliError(f"Run {run['id']} ended {run['state']}: {run.get('failure') or ''}")
        console.print(f"Model: {run['results']['model']}", highlight=False, markup=False)


@snapshots_app.command("register")
def snapshot_register(
    run_id: str,
    snapshot: str,
    model_name: str | None = typer.Option(
        None, "--model-name", help="Register under this name (the run's model name by default)."
    ),
    output: OutputOpt = "text",
) -> None:
    """Register a kept snapshot's adapter as a model version (a candidate), while the run
    trains or after.

    Example: {prog} training snapshots register 970076e8 step-40 --model-name gsm8k-step40
    """
    body = {"modelName": model_name} if model_name else {}
    d = Client().post(f"/v1/training/runs/{run_id}/snapshots/{snapshot}/register", json=body)
    emit(
        d,
        output,
        lambda r, w: print_kv(
            [("Registration", r["registrationId"]), ("State", r["state"]), ("Model", r["model"])]
        ),
    )
