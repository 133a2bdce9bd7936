"""``training comparisons`` commands (FEATURES F126, F140): create, get, list, cancel.

A thin client of ``/v1/training/comparisons``; the service decides what is accepted.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .client import Client
from .evaluations import (
    MaxTokensOpt,
    SeedOpt,
    TemperatureOpt,
    TopPOpt,
    job_body,
    judge_rows,
    sampling_body,
    submit_job,
)
from .output import OutputOpt, console, emit, print_kv, print_table

app = typer.Typer(
    help="Score two versions of a model on one dataset with one grader, example by example.\n\n"
    "Example: {prog} training comparisons create --model gsm8k/smollm2:v2 --baseline "
    "gsm8k/smollm2:v1 --dataset gsm8k/test --grader bundle:gsm8k/scoring#reward --wait",
    no_args_is_help=True,
)
BASE = "/v1/training/comparisons"


def _diff(c: dict[str, Any]) -> str:
    r = c.get("results") or {}
    if r.get("meanDifference") is None:
        return ""
    ci = r.get("ci95")
    band = f" [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else ""
    return f"{r['meanDifference']:+.4f}{band}"


def _line(c: dict[str, Any]) -> str:
    p = c.get("progress") or {}
    done = f" {p.get('completed', 0)}/{p.get('total', 0)} answers" if p.get("total") else ""
    phase = c.get("phase") or c.get("queueReason") or ""
    return f"{c['id'][:8]} {c['state']}{done}" + (f": {phase}" if phase else "")


def _show(c: dict[str, Any], wide: bool) -> None:
    r = c.get("results") or {}
    pairs: list[tuple[str, Any]] = [
        ("ID", c["id"]),
        ("Project", c.get("project")),
        ("State", c["state"]),
        ("Candidate", c.get("modelId")),
        ("Baseline", c.get("baselineModelId")),
        ("Dataset", c.get("dataset")),
        ("Grader", c.get("grader")),
        *(judge_rows(c) if c.get("judge") else []),
    ]
    if r:
        cand, base = r.get("candidate") or {}, r.get("baseline") or {}
        pairs += [
            ("Wins/losses/ties", f"{r['wins']}/{r['losses']}/{r['ties']} (candidate)"),
            ("Mean difference", f"{_diff(c)} (candidate − baseline, paired 95% CI)"),
            ("Candidate mean", cand.get("mean")),
            ("Baseline mean", base.get("mean")),
            ("Errors", f"{r.get('errors')} of {r.get('pairs', 0) + r.get('errors', 0)} pairs"),
        ]
    if c.get("failureReason"):
        pairs.append(("Failure", c["failureReason"]))
    if wide:
        pairs += [("Sampling", json.dumps(c.get("sampling"))), ("Created", c.get("createdAt"))]
    print_kv(pairs)
    for ex in c.get("mostDifferent") or []:
        console.print(
            f"\n#{ex['index']}  candidate {ex['scoreA']:g}  baseline {ex['scoreB']:g}",
            highlight=False,
            markup=False,
        )
        for side, key in (("candidate", "answerA"), ("baseline", "answerB")):
            text = (ex.get(key) or "").strip().replace("\n", " ")
            console.print(f"  {side}: {text[:200]}", highlight=False, markup=False)


@app.command("create")
def create(
    model: Annotated[
        str, typer.Option("--model", help="The candidate model (registry reference).")
    ],
    baseline: Annotated[
        str,
        typer.Option(
            "--baseline",
            help="The model it is compared with: the same base model or another adapter of it.",
        ),
    ],  # fmt: skip
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Registry reference of the dataset (the project's evaluation settings' when "
            "left out).",
        ),
    ] = None,
    grader: Annotated[
        str | None,
        typer.Option(
            "--grader",
            help="bundle:REFERENCE#MODULE[:FUNCTION], or model:REFERENCE, a judge that picks "
            "the better answer of each pair (the project's evaluation settings' when left out).",
        ),
    ] = None,
    grader_instructions: Annotated[
        str | None,
        typer.Option(
            "--grader-instructions",
            help="Instructions for a model: judge (refused with a bundle grader).",
        ),
    ] = None,  # fmt: skip
    project: Annotated[
        str | None, typer.Option("--project", help="Project (required for a base model).")
    ] = None,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N rows.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    output: OutputOpt = "text",
) -> None:
    """Compare two models: both answer every row, one grader scores both answers.

    Example: {prog} training comparisons create --model gsm8k/smollm2:v2 --baseline
    gsm8k/smollm2:v1 --dataset gsm8k/test --grader bundle:gsm8k/scoring#reward --wait
    """
    sampling = sampling_body(temperature, top_p, max_tokens, seed)
    body = job_body(model, dataset, grader, grader_instructions, project, limit, sampling)
    body["baselineModelId"] = baseline
    submit_job(BASE, "comparison", body, wait=wait, output=output, line=_line, show=_show)


@app.command("get")
def get(
    comparison: Annotated[str, typer.Argument(help="Comparison ID or prefix.")],
    examples: Annotated[bool, typer.Option("--examples", help="Every example pair.")] = False,
    output: OutputOpt = "text",
) -> None:
    """Show a comparison: wins, losses, ties, the mean difference and the examples that
    differ most."""
    params = {"examples": "true"} if examples else None
    emit(Client().get(f"{BASE}/{comparison}", params=params), output, _show)


@app.command("list")
def list_cmd(
    project: Annotated[str | None, typer.Option("--project")] = None, output: OutputOpt = "text"
) -> None:
    """List comparisons, newest first (recovers an ID without repeating the submission)."""
    data = Client().get(BASE, params={"project": project} if project else None)

    def text(d: dict[str, Any], wide: bool) -> None:
        rows = [
            {**c, "id": c["id"] if wide else c["id"][:8], "diff": _diff(c)}
            for c in d["comparisons"]
        ]
        print_table(
            rows,
            [
                ("ID", "id"),
                ("STATE", "state"),
                ("CANDIDATE", "model"),
                ("BASELINE", "baselineModel"),
                ("DIFFERENCE", "diff"),
            ],
        )

    emit(data, output, text)


@app.command("cancel")
def cancel(
    comparison: Annotated[str, typer.Argument(help="Comparison ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Cancel a comparison; it ends CANCELLED."""
    c = Client().post(f"{BASE}/{comparison}/cancel")
    emit(c, output, lambda d, _w: console.print(_line(d), highlight=False, markup=False))
