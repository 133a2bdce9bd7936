"""``training projects``: create, list and read training projects (seeds/001 "Workloads
are training projects"). A project's name cannot change; there is no rename. Text output
names a project by its name; ``-o json`` keeps its ID."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError
from .evaluations import MaxTokensOpt, SeedOpt, TemperatureOpt, TopPOpt, sampling_body
from .output import OutputOpt, console, emit, print_kv, print_table

app = typer.Typer(
    help="Training projects: the namespace of a task's runs and models.\n\n"
    "Example: {prog} training projects create triage",
    no_args_is_help=True,
)


DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        help="Evaluation dataset (registry reference; pinned to its version now). Each row's "
        "last assistant message is the reference answer.",
    ),
]
GraderOpt = Annotated[
    str | None,
    typer.Option(
        "--grader",
        help="bundle:REFERENCE#MODULE[:FUNCTION] or model:REFERENCE, a judge (pinned to its "
        "version now).",
    ),
]
InstructionsOpt = Annotated[
    str | None,
    typer.Option(
        "--grader-instructions",
        help="Instructions for a model: judge (refused with a bundle grader, which does not "
        "read them).",
    ),
]
AutoOpt = Annotated[
    bool,
    typer.Option(
        "--auto-evaluate/--no-auto-evaluate",
        help="Queue an evaluation of every model version registered in the project.",
    ),
]


def _settings_body(
    dataset: str | None,
    grader: str | None,
    grader_instructions: str | None,
    auto: bool,
    sampling: dict[str, Any] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"dataset": dataset, "grader": grader, "autoEvaluate": auto}
    if grader_instructions is not None:
        body["graderInstructions"] = grader_instructions
    if sampling:
        body["sampling"] = sampling
    return body


def _settings_pairs(ev: dict[str, Any] | None) -> list[tuple[str, Any]]:
    if not ev:
        return [("Evaluation", "(none: set with training projects set-evaluation)")]
    pairs: list[tuple[str, Any]] = [
        ("Evaluation dataset", ev.get("dataset")),
        ("Grader", ev.get("grader")),
        ("Bundle", ev.get("bundle")),
        (
            "Instructions",
            (ev.get("graderInstructions") or f"(not given: {ev.get('instructionsSource')})")
            if str(ev.get("grader") or "").startswith("model:")
            else "(none: a bundle grader)",
        ),
        ("Sampling", json.dumps(ev.get("sampling"))),
        ("Auto-evaluate", "yes" if ev.get("autoEvaluate") else "no"),
    ]
    last = ev.get("lastQueued")
    if last:
        what = (
            f"evaluation {last['evaluationId'][:8]}"
            if last.get("evaluationId")
            else f"not queued: {last.get('error')}"
        )
        pairs.append(("Last registered", f"{last.get('model')} → {what}"))
    return pairs


def _text_one(p: dict[str, Any], wide: bool) -> None:
    pairs = [("Name", p["name"]), ("Created", p.get("createdAt"))]
    pairs += _settings_pairs(p.get("evaluation"))
    if wide:
        pairs.append(("ID", p["id"]))
    print_kv(pairs)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The project's name; it cannot change."),
    dataset: DatasetOpt = None,
    grader: GraderOpt = None,
    grader_instructions: InstructionsOpt = None,
    auto_evaluate: AutoOpt = True,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Create a training project, with its evaluation settings when --dataset and --grader
    are given (see set-evaluation).

    Example: {prog} training projects create triage --dataset triage/val
    --grader bundle:triage/scoring#reward
    """
    body: dict[str, Any] = {"name": name}
    if dataset is not None or grader is not None:
        if dataset is None or grader is None:
            raise CliError("Evaluation settings need both --dataset and --grader.")
        sampling = sampling_body(temperature, top_p, max_tokens, seed)
        body["evaluation"] = _settings_body(
            dataset, grader, grader_instructions, auto_evaluate, sampling
        )
    p = Client("trainer").post("/v1/training/projects", json=body)

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


@app.command("set-evaluation")
def set_evaluation(
    project: Annotated[str, typer.Argument(help="Project name (or ID).")],
    dataset: Annotated[
        str,
        typer.Option(
            "--dataset", help="Evaluation dataset (registry reference; pinned to its version now)."
        ),
    ],
    grader: Annotated[
        str,
        typer.Option(
            "--grader",
            help="bundle:REFERENCE#MODULE[:FUNCTION] or model:REFERENCE, a judge (pinned to its "
            "version now).",
        ),
    ],
    grader_instructions: InstructionsOpt = None,
    auto_evaluate: AutoOpt = True,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Set a project's evaluation settings: the dataset, grader and sampling its models are
    scored with. Every model version registered in the project afterwards gets an
    evaluation queued (--no-auto-evaluate turns that off); `training projects scores`
    ranks the models on these settings, and `training evaluations start` takes them when
    --dataset and --grader are left out.

    Example: {prog} training projects set-evaluation triage --dataset triage/val
    --grader bundle:triage/scoring#reward --max-tokens 128
    """
    sampling = sampling_body(temperature, top_p, max_tokens, seed)
    body = _settings_body(dataset, grader, grader_instructions, auto_evaluate, sampling)
    p = Client("trainer").put(f"/v1/training/projects/{project}/evaluation", json=body)

    def text(d: dict[str, Any], wide: bool) -> None:
        print(f"Set the evaluation settings of project {d['name']}.")
        print_kv(_settings_pairs(d.get("evaluation")))

    emit(p, output, text)


def _score(m: dict[str, Any]) -> str:
    if m.get("mean") is None:
        return ""
    se = f" ± {m['stderr']:.4f}" if m.get("stderr") is not None else ""
    return f"{m['mean']:.4f}{se}"


@app.command("scores")
def scores(
    project: Annotated[str, typer.Argument(help="Project name (or ID).")],
    output: OutputOpt = "text",
) -> None:
    """The project's scores table: one row per base-model version (with the repository's
    spelling), and under it the project's models scored on its evaluation settings, best
    first (each model's newest succeeded evaluation over the whole dataset).

    Example: {prog} training projects scores triage
    """
    data = Client("trainer").get(f"/v1/training/projects/{project}/scores")

    def text(d: dict[str, Any], wide: bool) -> None:
        console.print(
            f"Scores of project {d['project']} on {d['dataset']} with {d['grader']}",
            highlight=False,
            markup=False,
        )
        if not d["rows"]:
            console.print(
                "No model has a succeeded evaluation on these settings yet.",
                highlight=False,
                markup=False,
            )
        for row in d["rows"]:
            console.print(
                f"\n{row['baseModel']}  ({row.get('repository') or 'repository unknown'})",
                highlight=False,
                markup=False,
            )
            items = [
                {
                    **m,
                    "score": _score(m),
                    "n": f"{m.get('count')} ({m.get('errors')} errors)",
                    "evaluation": m["evaluationId"] if wide else m["evaluationId"][:8],
                }
                for m in row["models"]
            ]
            print_table(
                items,
                [
                    ("MODEL", "model"),
                    ("SCORE", "score"),
                    ("EXAMPLES", "n"),
                    ("EVALUATION", "evaluation"),
                ],
            )

    emit(data, output, text)
