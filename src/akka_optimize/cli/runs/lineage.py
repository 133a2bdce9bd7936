"""``training runs compare|sweep|tree|ancestry``: runs against each other and their branches."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ..client import Client
from ..context import CliError
from ..evaluations import DONE, MaxTokensOpt, SeedOpt, TemperatureOpt, TopPOpt, sampling_body
from ..output import OutputOpt, console, emit, print_table, wait_for
from .follow import follow_run
from .settings_text import fmt as _fmt
from .start import app


def _print_comparison(d: dict, wide: bool) -> None:
    """The text form of ``runs compare``: windows, spikes, and the verdict."""
    console.print(
        f"Run {d['run']} against baseline {d['baseline']}: {d['comparedSteps']} updates "
        f"in common, windows of {d['window']}, margin {_fmt(d['margin'])}"
    )
    print_table(
        [
            {
                "steps": f"{w['first']}-{w['last']}",
                "run": _fmt(w["runMean"], 6),
                "baseline": _fmt(w["baselineMean"], 6),
                "diff": f"{w['meanDifference']:+.3g}",
                "full": "yes" if w["full"] else "",
                "runAcc": _fmt(w.get("runAccuracy")),
                "baseAcc": _fmt(w.get("baselineAccuracy")),
            }
            for w in d["windows"]
        ],
        [
            ("STEPS", "steps"),
            ("RUN MEAN", "run"),
            ("BASELINE MEAN", "baseline"),
            ("DIFFERENCE", "diff"),
            ("FULL", "full"),
            *(
                [("RUN ACCURACY", "runAcc"), ("BASELINE ACCURACY", "baseAcc")]
                if any("runAccuracy" in w for w in d["windows"])
                else []
            ),
        ],
    )
    if d["spikes"]:
        console.print("Gradient spikes")
        print_table(
            [{k: _fmt(v) for k, v in sp.items()} for sp in d["spikes"]],
            [
                ("RUN", "run"),
                ("STEP", "step"),
                ("GRAD NORM", "gradNorm"),
                ("WINDOW MEDIAN", "median"),
                ("FACTOR", "factor"),
            ],
        )
    else:
        console.print("Gradient spikes: none")
    w = d["firstWindowPastMargin"]
    if not d.get("fullWindows"):
        console.print(
            f"No full window of {d['window']} updates in common, so none was judged; "
            "a smaller --window judges shorter runs."
        )
    elif w is None:
        console.print(
            f"No full window differs by more than {_fmt(d['margin'])} ({d['fullWindows']} judged)."
        )
    else:
        console.print(
            f"First full window past the margin: updates {w['first']}-{w['last']}, "
            f"mean difference {w['meanDifference']:+.4g} (margin {_fmt(d['margin'])})."
        )


@app.command("compare")
def compare(
    run_id: str,
    baseline_run_id: str,
    window: Annotated[int, typer.Option(help="Updates per window.")] = 10,
    margin: Annotated[
        float, typer.Option(help="Largest mean loss difference a full window may show.")
    ] = 0.02,
    spike_factor: Annotated[
        float,
        typer.Option(help="A gradient norm this many times the window's median is a spike."),
    ] = 3.0,
    output: OutputOpt = "text",
) -> None:
    """Compare the training loss of two supervised runs of one configuration: the mean
    difference per window, gradient spikes, and the first full window past the margin.

    Example: {prog} training runs compare 970076e8 5c2d9a10 --window 20
    """
    data = Client().get(
        f"/v1/training/runs/{run_id}/compare",
        params={
            "baseline": baseline_run_id,
            "window": window,
            "margin": margin,
            "spikeFactor": spike_factor,
        },
    )

    emit(data, output, _print_comparison)


def follow_comparison(client: Client, comparison_id: str, output: str) -> dict:
    """Poll a comparison until it ends (one line per change on standard error)."""

    last: dict = {}

    def poll() -> tuple[bool, str]:
        last.update(client.get(f"/v1/training/comparisons/{comparison_id}"))
        p = last.get("progress") or {}
        why = last.get("phase") or last.get("queueReason") or ""
        return last["state"] in DONE, (
            f"comparison {comparison_id[:8]} {last['state']} "
            f"{p.get('completed', 0)}/{p.get('total', 0)}" + (f": {why}" if why else "")
        )

    wait_for(poll, interval=0.5)
    return dict(last)


@app.command("sweep")
def sweep(
    run_id: str,
    snapshot: Annotated[str, typer.Option(help="The source snapshot, e.g. step-4000.")],
    steps: Annotated[int, typer.Option(help="Updates each branch trains after it.")],
    grid: Annotated[
        str, typer.Option(help="JSON file: plan paths to lists of values, or a list of points.")
    ],
    dataset: Annotated[
        str | None, typer.Option(help="Validation dataset of every branch, to rank them by.")
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Once every branch has ended, score the source snapshot and every branch on "
            "--dataset as one comparison, and rank the fan by score.",
        ),
    ] = False,
    grader: Annotated[
        str | None,
        typer.Option(
            "--grader",
            help="The comparison's grader (bundle:REF#MODULE[:FUNCTION] or model:REF); the "
            "project's evaluation settings' when left out.",
        ),
    ] = None,
    grader_instructions: Annotated[
        str | None,
        typer.Option("--grader-instructions", help="Instructions for a model: judge."),
    ] = None,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for every branch (and the comparison).")
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Submit one branch per grid point from one snapshot of a run.

    Example: {prog} training runs sweep 970076e8 --snapshot step-4000 --steps 200 --grid learning-rate.json --dataset triage-val --compare
    """
    points = _read_grid(grid)
    client = Client()
    body = {"snapshot": snapshot, "steps": steps, "grid": points, "dataset": dataset}
    if compare:
        body["compare"] = True
        extra = {"grader": grader, "graderInstructions": grader_instructions}
        body.update({k: v for k, v in extra.items() if v is not None})
        sampling = sampling_body(temperature, top_p, max_tokens, seed)
        if sampling:
            body["sampling"] = sampling
    elif grader or grader_instructions or sampling_body(temperature, top_p, max_tokens, seed):
        raise CliError("--grader, --grader-instructions and the sampling options need --compare.")
    data = client.post(f"/v1/training/runs/{run_id}/sweep", json=body)
    if wait:
        for p in data["points"]:
            p["run"] = follow_run(client, p["run"]["id"], output)
        if data.get("comparison"):
            data["comparison"] = follow_comparison(client, data["comparison"]["id"], output)

    emit(data, output, _sweep_text)


def _read_grid(grid: str) -> Any:
    """The sweep's grid file as JSON.

    Raises:
        CliError: the file cannot be read, or is not JSON (line and column named).
    """
    from pathlib import Path

    try:
        return json.loads(Path(grid).read_text())
    except OSError as exc:
        raise CliError(f"Cannot read the grid file {grid}: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{grid} line {exc.lineno} column {exc.colno}: not valid JSON: {exc.msg}."
        ) from exc


def _sweep_text(d: dict, wide: bool) -> None:
    """A sweep as text: its branches ranked by the comparison's score (or validation
    loss), one row per grid point."""
    n, k = len(d["points"]), d["steps"]
    console.print(
        f"Sweep of run {d['source']} from {d['snapshot']}: {n} branch{'es' if n != 1 else ''} "
        f"of {k} update{'s' if k != 1 else ''}"
    )
    points = list(d["points"])
    cmp = d.get("comparison") or {}
    fan = {f["run"]: f for f in cmp.get("fan") or []}
    scored = [p["run"]["results"]["validationLoss"] for p in points]
    if fan:  # best score first (the comparison ranks the fan); unscored branches last
        order = [f["run"] for f in cmp["fan"]]
        points.sort(key=lambda p: order.index(p["run"]["id"]) if p["run"]["id"] in fan else 1e9)
        src = cmp.get("source") or {}
        console.print(
            f"Ranked by score on {cmp.get('dataset')} ({cmp.get('grader')}), best first; "
            f"the source snapshot scores {_fmt(src.get('mean'))} "
            f"(comparison {cmp['id'][:8]})."
        )
    elif all(v is not None for v in scored):  # best validation loss first
        points.sort(key=lambda p: p["run"]["results"]["validationLoss"])
        console.print("Ranked by validation loss, best first.")
    rows = []
    for p in points:
        f = fan.get(p["run"]["id"]) or {}
        vs = f.get("vsSource") or {}
        rows.append(
            {
                "run": p["run"]["id"][:8],
                "point": " ".join(
                    f"{k.rsplit('.', 1)[-1]}={json.dumps(v)}" for k, v in p["point"].items()
                ),
                "state": p["run"]["state"],
                "loss": _fmt(p["run"]["results"]["finalLoss"]),
                "val": _fmt(p["run"]["results"]["validationLoss"]),
                "score": _fmt(f.get("mean")),
                "vs": f"{vs['wins']}/{vs['losses']}/{vs['ties']}" if vs else "",
                "model": p["run"]["results"]["model"],
            }
        )
    columns = [("RUN", "run"), ("POINT", "point"), ("STATE", "state"),
               ("FINAL LOSS", "loss"), ("VAL LOSS", "val")]  # fmt: skip
    if cmp:
        columns += [("SCORE", "score"), ("W/L/T VS SOURCE", "vs")]
    print_table(rows, [*columns, ("MODEL", "model")])
    if cmp and not fan:
        console.print(
            f"Comparison {cmp['id'][:8]} {cmp['state']}"
            + (f": {cmp.get('failureReason')}" if cmp.get("failureReason") else "")
            + f"; `training comparisons get {cmp['id'][:8]}` shows it."
        )


@app.command("tree")
def tree(run_id: str, output: OutputOpt = "text") -> None:
    """Show every generation of branches below a run.

    Example: {prog} training runs tree 970076e8
    """

    def text(d: dict, wide: bool) -> None:
        def walk(node: dict, depth: int) -> None:
            at = f" from {node['snapshot']}" if depth and node.get("snapshot") else ""
            model = f"  {node['model']}" if node.get("model") else ""
            line = f"{'  ' * depth}{node['run']}{at}  {node['state']}{model}"
            console.print(line, highlight=False, markup=False)
            for child in node["branches"]:
                walk(child, depth + 1)

        walk(d, 0)

    emit(Client().get(f"/v1/training/runs/{run_id}/tree"), output, text)


@app.command("ancestry")
def ancestry(run_id: str, output: OutputOpt = "text") -> None:
    """Walk back from a run to the run its lineage started from.

    Example: {prog} training runs ancestry 5c2d9a10
    """

    def text(d: dict, wide: bool) -> None:
        for i, r in enumerate(d["ancestry"]):
            at = f"  branched at {r['snapshot']}" if r.get("snapshot") else "  (root)"
            line = f"{'<- ' if i else ''}{r['run']}  {r['state']}{at}"
            console.print(line, highlight=False, markup=False)

    emit(Client().get(f"/v1/training/runs/{run_id}/ancestry"), output, text)
