"""``training evaluations`` commands (FEATURES F121, F123, F127): start, get, list, cancel.

A thin client of ``/v1/training/evaluations``; the service decides what is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError
from .openai_grader import grader_spec
from .output import OutputOpt, console, emit, print_kv, print_table, wait_for

app = typer.Typer(
    help="Score a model's answers to a dataset with a grader.\n\n"
    "Example: {prog} training evaluations start --model gsm8k/smollm2:v1 --dataset gsm8k/val "
    "--grader bundle:gsm8k/scoring#reward --wait",
    no_args_is_help=True,
)
BASE = "/v1/training/evaluations"
DONE = ("SUCCEEDED", "FAILED", "CANCELLED")

TemperatureOpt = Annotated[
    float | None,
    typer.Option("--temperature", help="Sampling temperature; 0 (greedy) unless set."),
]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling mass (1).")]
MaxTokensOpt = Annotated[
    int | None, typer.Option("--max-tokens", help="Longest answer, in tokens (256).")
]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Sampling seed (0).")]


def sampling_body(
    temperature: float | None, top_p: float | None, max_tokens: int | None, seed: int | None
) -> dict[str, Any] | None:
    """The request's ``sampling`` object from the sampling options given (None when none
    is: the service's defaults, or the project's evaluation settings, apply)."""
    given = {"temperature": temperature, "topP": top_p, "maxTokens": max_tokens, "seed": seed}
    body = {k: v for k, v in given.items() if v is not None}
    return body or None


def _score(ev: dict[str, Any]) -> str:
    r = ev.get("results")
    if not r or r.get("mean") is None:
        return ""
    se = f" ± {r['stderr']:.4f}" if r.get("stderr") is not None else ""
    return f"{r['mean']:.4f}{se}"


def _line(ev: dict[str, Any]) -> str:
    p = ev.get("progress") or {}
    done = f" {p.get('completed', 0)}/{p.get('total', 0)} examples" if p.get("total") else ""
    phase = ev.get("phase") or ev.get("queueReason") or ""
    return f"{ev['id'][:8]} {ev['state']}{done}" + (f": {phase}" if phase else "")


def _show(ev: dict[str, Any], wide: bool) -> None:
    r = ev.get("results") or {}
    pairs: list[tuple[str, Any]] = [
        ("ID", ev["id"]),
        ("Project", ev.get("project")),
        ("State", ev["state"]),
        ("Model", ev.get("modelId")),
        ("Dataset", ev.get("dataset")),
        ("Grader", ev.get("grader")),
        *judge_rows(ev),
        ("Progress", f"{ev['progress']['completed']}/{ev['progress']['total']} examples"),
    ]
    if r:
        pairs += [
            ("Score", f"{_score(ev)} (mean ± standard error)"),
            ("Examples", f"{r.get('count')} ({r.get('scored')} scored, {r.get('errors')} errors)"),
        ]
    if ev.get("failureReason"):
        pairs.append(("Failure", ev["failureReason"]))
    if wide:
        pairs += [("Sampling", json.dumps(ev.get("sampling"))), ("Created", ev.get("createdAt"))]
    print_kv(pairs)
    for ex in ev.get("examples") or []:
        score = "error" if ex.get("score") is None else f"{ex['score']:g}"
        console.print(f"\n#{ex['index']}  score {score}", highlight=False, markup=False)
        if ex.get("error"):
            console.print(f"  error: {ex['error']}", highlight=False, markup=False)
        answer = (ex.get("answer") or "").strip().replace("\n", " ")
        console.print(f"  answer: {answer[:300]}", highlight=False, markup=False)


SOURCES = {
    "given": "given beside the grader",
    "judge-training": "the judge's training instructions",
    "built-in": "built-in, with the dataset's first system message",
}
"""How ``get`` names where a judge's instructions came from."""


def judge_rows(ev: dict[str, Any]) -> list[tuple[str, Any]]:
    """The grader rows of ``get``: a bundle's version, or a judge's version, endpoint,
    instructions and their source."""
    if not ev.get("judge"):
        return [("Bundle", ev.get("bundle")), ("Instructions", "(none: a bundle grader)")]
    src = ev.get("instructionsSource")
    return [
        ("Judge", ev.get("judge")),
        ("Judge endpoint", ev.get("judgeEndpoint") or "(started when grading begins)"),
        ("Instructions", ev.get("graderInstructions")),
        ("Instructions source", f"{src} ({SOURCES.get(src or '', '?')})"),
    ]


def job_body(
    model: str,
    dataset: str | None,
    grader: str | None,
    grader_instructions: str | None,
    project: str | None,
    limit: int | None,
    sampling: dict[str, Any] | None,
) -> dict[str, Any]:
    """The request body an evaluation and a comparison share (options left out are not
    sent, so the project's evaluation settings fill the dataset, grader and sampling)."""
    body: dict[str, Any] = {"modelId": model}
    for key, value in (("dataset", dataset), ("grader", grader), ("sampling", sampling)):
        if value is not None:
            body[key] = value
    if grader_instructions is not None:
        body["graderInstructions"] = grader_instructions
    if project:
        body["project"] = project
    if limit is not None:
        body["limit"] = limit
    return body


def submit_job(
    base: str,
    noun: str,
    body: dict[str, Any],
    *,
    wait: bool,
    output: str,
    line: Callable[[dict[str, Any]], str],
    show: Callable[[dict[str, Any], bool], None],
) -> None:
    """POST ``body`` to ``base``; with ``wait`` follow the job until it ends, printing
    ``line`` per milestone, and exit non-zero unless it succeeded (``noun`` names it)."""
    c = Client()
    job = c.post(base, json=body)
    if output == "text":
        console.print(f"Started {noun} {job['id']}.", highlight=False)
    if wait:
        last: dict[str, Any] = {}

        def poll() -> tuple[bool, str]:
            last.update(c.get(f"{base}/{job['id']}"))
            return last["state"] in DONE, line(last)

        wait_for(poll, interval=0.5)
        job = last
    emit(job, output, show)
    if wait and job["state"] != "SUCCEEDED":
        raise CliError(
            f"{noun.capitalize()} {job['id']} ended {job['state']}"
            + (f": {job['failureReason']}" if job.get("failureReason") else ".")
        )


@app.command("start")
def start(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Registry reference of the model: a trained adapter (its project is the "
            "evaluation's) or a base model (needs --project).",
        ),
    ],
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Registry reference of the dataset. Each row's last assistant message is the "
            "reference answer; the messages before it are the prompt. Left out: the "
            "project's evaluation settings' dataset.",
        ),
    ] = None,
    grader: Annotated[
        str | None,
        typer.Option(
            "--grader",
            help="bundle:REFERENCE#MODULE[:FUNCTION]; FUNCTION defaults to compute_score "
            "(veRL's compute_score(data_source, solution_str, ground_truth, extra_info)), or "
            "model:REFERENCE, a judge model served on its own endpoint that scores each "
            "answer 0-10, or openai:FILE.json, an OpenAI grader object (registered as a bundle "
            "of PROJECT/openai-grader). Left out: the project's evaluation settings' grader.",
        ),
    ] = None,
    grader_instructions: Annotated[
        str | None,
        typer.Option(
            "--grader-instructions",
            help="Instructions for a model: judge (refused with a bundle grader, which does not "
            "read them). Left out: the judge's training instructions, else the built-in ones.",
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Project (required for a base model).")
    ] = None,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Evaluate only the first N rows.")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Follow it (completed/total examples) until it ends."),
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Start an evaluation: the model answers every row's prompt, the grader scores each answer.

    The model, dataset and bundle are pinned to exact versions when it is accepted. With
    --wait the command exits non-zero when the evaluation fails or is cancelled.

    Example: {prog} training evaluations start --model gsm8k/smollm2:v1 --dataset gsm8k/val
    --grader bundle:gsm8k/scoring#reward --limit 50 --wait
    """

    sampling = sampling_body(temperature, top_p, max_tokens, seed)
    grader = grader_spec(grader, model, project) if grader else None
    body = job_body(model, dataset, grader, grader_instructions, project, limit, sampling)
    submit_job(BASE, "evaluation", body, wait=wait, output=output, line=_line, show=_show)


@app.command("get")
def get(
    evaluation: Annotated[str, typer.Argument(help="Evaluation ID or prefix.")],
    examples: Annotated[
        bool, typer.Option("--examples", help="Show every example's answer and score.")
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Show an evaluation: its pinned references, progress, score and error count."""
    params = {"examples": "true"} if examples else None
    emit(Client().get(f"{BASE}/{evaluation}", params=params), output, _show)


@app.command("list")
def list_cmd(
    project: Annotated[str | None, typer.Option("--project")] = None, output: OutputOpt = "text"
) -> None:
    """List evaluations, newest first."""
    data = Client().get(BASE, params={"project": project} if project else None)

    def text(d: dict[str, Any], wide: bool) -> None:
        rows = [
            {**e, "id": e["id"] if wide else e["id"][:8], "score": _score(e)}
            for e in d["evaluations"]
        ]
        print_table(
            rows,
            [
                ("ID", "id"),
                ("PROJECT", "project"),
                ("STATE", "state"),
                ("MODEL", "model"),
                ("SCORE", "score"),
            ],
        )

    emit(data, output, text)


@app.command("cancel")
def cancel(
    evaluation: Annotated[str, typer.Argument(help="Evaluation ID or prefix.")],
    output: OutputOpt = "text",
) -> None:
    """Cancel an evaluation; it ends CANCELLED (what it recorded is kept)."""
    ev = Client().post(f"{BASE}/{evaluation}/cancel")
    emit(ev, output, lambda d, _w: console.print(_line(d), highlight=False, markup=False))
