"""``training curations`` and ``training pipelines`` commands (issue 19; FEATURES F022,
F023).

Thin clients of ``/v1/training/curations`` and ``/v1/training/pipelines``; the service
checks every request and decides what is accepted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError
from .evaluations import DONE, submit_job
from .output import OutputOpt, console, emit, print_kv, print_table, wait_for
from .runs.start import read_plan_file

curations_app = typer.Typer(
    help="Curate a dataset with a model: judge: keep the rows it scores well.\n\n"
    "Example: {prog} training curations start --project demo --source demo/raw --judge "
    "model:demo/judge --min-score 0.7 --dataset demo/curated --wait",
    no_args_is_help=True,
)
pipelines_app = typer.Typer(
    help="Run a pipeline: curate, train and evaluate stages, in order, as jobs.\n\n"
    "Example: {prog} training pipelines start -f pipeline.json --wait",
    no_args_is_help=True,
)
CURATIONS = "/v1/training/curations"
PIPELINES = "/v1/training/pipelines"


def _curation_line(c: dict[str, Any]) -> str:
    p = c.get("progress") or {}
    done = f" {p.get('completed', 0)}/{p.get('total', 0)} rows" if p.get("total") else ""
    phase = c.get("phase") or c.get("queueReason") or ""
    return f"{c['id'][:8]} {c['state']}{done}" + (f": {phase}" if phase else "")


def _show_curation(c: dict[str, Any], wide: bool) -> None:
    r = c.get("results") or {}
    out = c.get("outputs") or {}
    pairs: list[tuple[str, Any]] = [
        ("ID", c["id"]),
        ("Project", c.get("project")),
        ("State", c["state"]),
        ("Source", c.get("source")),
        ("Judge", c.get("judge")),
        ("Judge endpoint", c.get("judgeEndpoint") or "(started when judging begins)"),
        ("Instructions source", c.get("instructionsSource")),
        ("Keep", json.dumps(c.get("keep"))),
        ("Progress", f"{c['progress']['completed']}/{c['progress']['total']} rows"),
    ]
    if r:
        mean = r.get("mean")
        pairs += [
            ("Rows", f"{r.get('count')} ({r.get('scored')} scored, {r.get('errors')} errors)"),
            ("Kept", r.get("kept")),
            ("Mean score", f"{mean:.4f}" if mean is not None else "-"),
        ]
    pairs += [
        ("Dataset", out.get("dataset") or f"{c.get('dataset')} (not registered yet)"),
        (
            "Judge dataset",
            out.get("judgeDataset") or f"{c.get('judgeDataset')} (not registered yet)",
        ),
    ]
    if c.get("failureReason"):
        pairs.append(("Failure", c["failureReason"]))
    if wide:
        pairs += [("Instructions", c.get("judgeInstructions")), ("Created", c.get("createdAt"))]
    print_kv(pairs)


@curations_app.command("start")
def curation_start(
    project: Annotated[str, typer.Option("--project", help="The project it runs in.")],
    source: Annotated[
        str, typer.Option("--source", help="Registry reference of the dataset to curate.")
    ],
    judge: Annotated[
        str, typer.Option("--judge", help="model:REFERENCE, the judge that scores each row 0-10.")
    ],
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Required: the dataset (NS/NAME) the kept rows are registered under; the "
            "judge's dataset goes beside it with a -judge suffix.",
        ),
    ] = None,
    min_score: Annotated[
        float | None, typer.Option("--min-score", help="Keep rows scoring at least this (0-1).")
    ] = None,
    top_share: Annotated[
        float | None, typer.Option("--top-share", help="Keep the best share of the rows (0-1].")
    ] = None,
    instructions: Annotated[
        str | None,
        typer.Option(
            "--judge-instructions",
            help="The judge's instructions; left out, its training instructions, else the "
            "built-in ones.",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Curate only the first N rows.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    output: OutputOpt = "text",
) -> None:
    """Start a curation: the judge scores every row; the kept rows become a new dataset.

    Example: {prog} training curations start --project demo --source demo/raw --judge
    model:HuggingFaceTB/SmolLM2-135M-Instruct --top-share 0.5 --dataset demo/curated --wait
    """
    keep = {k: v for k, v in (("minScore", min_score), ("topShare", top_share)) if v is not None}
    body: dict[str, Any] = {"project": project, "source": source, "judge": judge, "keep": keep}
    for key, value in (("dataset", dataset), ("judgeInstructions", instructions), ("limit", limit)):
        if value is not None:
            body[key] = value
    submit_job(
        CURATIONS, "curation", body, wait=wait, output=output, line=_curation_line,
        show=_show_curation,
    )  # fmt: skip


@curations_app.command("get")
def curation_get(
    curation: Annotated[str, typer.Argument(help="Curation ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Show a curation: its source, judge, keep rule, progress and registered datasets."""
    emit(Client().get(f"{CURATIONS}/{curation}"), output, _show_curation)


@curations_app.command("list")
def curation_list(
    project: Annotated[str | None, typer.Option("--project")] = None, output: OutputOpt = "text"
) -> None:
    """List curations, newest first."""
    data = Client().get(CURATIONS, params={"project": project} if project else None)

    def text(d: dict[str, Any], wide: bool) -> None:
        rows = [
            {
                **c,
                "id": c["id"] if wide else c["id"][:8],
                "kept": (c.get("results") or {}).get("kept"),
            }
            for c in d["curations"]
        ]
        cols = [("ID", "id"), ("PROJECT", "project"), ("STATE", "state"), ("SOURCE", "source"),
                ("DATASET", "dataset"), ("KEPT", "kept")]  # fmt: skip
        print_table(rows, cols)

    emit(data, output, text)


@curations_app.command("cancel")
def curation_cancel(
    curation: Annotated[str, typer.Argument(help="Curation ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Cancel a curation; nothing is registered."""
    emit(Client().post(f"{CURATIONS}/{curation}/cancel", json={}), output, _show_curation)


def _stage_output(st: dict[str, Any]) -> str:
    out = st.get("output")
    if isinstance(out, dict):
        mean = out.get("mean")
        return f"score {mean:.4f}" if mean is not None else ""
    return str(out or "")


def _show_pipeline(p: dict[str, Any], wide: bool) -> None:
    print_kv(
        [
            ("ID", p["id"]),
            ("Project", p.get("project")),
            ("State", p["state"]),
            ("Submission", p.get("submissionId") or "-"),
            ("Configuration hash", p.get("configHash")),
            *([("Failure", p["failureReason"])] if p.get("failureReason") else []),
        ]
    )
    rows = [{**st, "job": st.get("job") or "-", "out": _stage_output(st)} for st in p["stages"]]
    console.print()
    cols = [("#", "index"), ("STAGE", "name"), ("KIND", "kind"), ("STATE", "state"),
            ("JOB", "job"), ("OUTPUT", "out")]  # fmt: skip
    print_table(rows, cols)
    if wide:
        for st in p["stages"]:
            console.print(f"\n{st['name']} settings:", highlight=False, markup=False)
            console.print(json.dumps(st.get("settings"), indent=2), highlight=False, markup=False)


def _show_dry_run(report: dict[str, Any], wide: bool) -> None:
    console.print(
        "Dry run: the pipeline is accepted; nothing was created.", highlight=False, markup=False
    )
    console.print(f"Configuration hash: {report['configHash']}", highlight=False, markup=False)
    for st in report["stages"]:
        console.print(
            f"\nstages[{st['index']}] {st['name']} ({st['kind']}), configuration hash "
            f"{st['configHash'][:16]}:",
            highlight=False,
            markup=False,
        )
        console.print(json.dumps(st["settings"], indent=2), highlight=False, markup=False)


def _pipeline_line(p: dict[str, Any]) -> str:
    now = next((st for st in p["stages"] if st["state"] != "SUCCEEDED"), None)
    where = f": stage {now['name']} {now['state']}" if now and p["state"] == "RUNNING" else ""
    return f"{p['id'][:8]} {p['state']}{where}"


@pipelines_app.command("start")
def pipeline_start(
    file: Annotated[
        Path, typer.Option("--file", "-f", help="The pipeline descriptor (JSON or YAML).")
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check every stage and show its settings; create nothing."),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Follow it until it ends; exit non-zero unless it SUCCEEDED."),
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Start a pipeline, or check it with --dry-run.

    Example: {prog} training pipelines start -f pipeline.json --dry-run
    """
    c = Client()
    descriptor = read_plan_file(file)
    if dry_run:
        emit(c.post(PIPELINES, json=descriptor, params={"dryRun": "true"}), output, _show_dry_run)
        return
    p = c.post(PIPELINES, json=descriptor)
    if output == "text":
        console.print(f"Started pipeline {p['id']}.", highlight=False)
    if wait:
        last: dict[str, Any] = {}

        def poll() -> tuple[bool, str]:
            last.update(c.get(f"{PIPELINES}/{p['id']}"))
            return last["state"] in DONE, _pipeline_line(last)

        wait_for(poll, interval=1.0)
        p = last
    emit(p, output, _show_pipeline)
    if wait and p["state"] != "SUCCEEDED":
        raise CliError(
            f"Pipeline {p['id']} ended {p['state']}"
            + (f": {p['failureReason']}" if p.get("failureReason") else ".")
        )


@pipelines_app.command("get")
def pipeline_get(
    pipeline: Annotated[str, typer.Argument(help="Pipeline ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Show a pipeline and every stage: its state, job and output (-o wide: settings)."""
    emit(Client().get(f"{PIPELINES}/{pipeline}"), output, _show_pipeline)


@pipelines_app.command("list")
def pipeline_list(
    project: Annotated[str | None, typer.Option("--project")] = None, output: OutputOpt = "text"
) -> None:
    """List pipelines, newest first."""
    data = Client().get(PIPELINES, params={"project": project} if project else None)

    def text(d: dict[str, Any], wide: bool) -> None:
        rows = [
            {**p, "id": p["id"] if wide else p["id"][:8],
             "names": " -> ".join(st["name"] for st in p["stages"])}
            for p in d["pipelines"]
        ]  # fmt: skip
        cols = [("ID", "id"), ("PROJECT", "project"), ("STATE", "state"), ("STAGES", "names"),
                ("SUBMISSION", "submissionId")]  # fmt: skip
        print_table(rows, cols)

    emit(data, output, text)


@pipelines_app.command("cancel")
def pipeline_cancel(
    pipeline: Annotated[str, typer.Argument(help="Pipeline ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Cancel a running pipeline and its current stage's job."""
    emit(Client().post(f"{PIPELINES}/{pipeline}/cancel", json={}), output, _show_pipeline)


@pipelines_app.command("resume")
def pipeline_resume(
    pipeline: Annotated[str, typer.Argument(help="Pipeline ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Start a failed or cancelled pipeline again from its first unfinished stage."""
    emit(Client().post(f"{PIPELINES}/{pipeline}/resume", json={}), output, _show_pipeline)
