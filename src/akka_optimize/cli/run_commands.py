"""``training runs get|list|wait|metrics|snapshots|failure|cancel|pause|resume`` and
``training snapshots get``. (``runs start`` lives in :mod:`.runs`.)"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, console, emit, print_kv, print_table, wait_for
from .runs import app

snapshots_app = typer.Typer(help="Saved snapshots of runs.", no_args_is_help=True)

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def progress_line(run: dict[str, Any]) -> str:
    """One line of live progress: state, step, loss, phase or queue reason."""
    r = run["results"]
    parts = [f"run {run['id'][:8]} {run['state']}"]
    if run["state"] == "QUEUED" and run.get("queueReason"):
        parts.append(f"({run['queueReason']})")
    elif run.get("phase"):
        parts.append(f"({run['phase']})")
    if r.get("totalSteps") or r.get("step"):
        parts.append(f"step {r.get('step') or 0}/{r.get('totalSteps') or '?'}")
    if run["state"] in TERMINAL:
        parts.append(f"final step {r.get('step')}")
    return " ".join(parts)


def wait_for_run(client: Client, run_id: str, timeout: float | None = None) -> dict[str, Any]:
    """Follow a run until it ends; returns its final view. Milestones per wait_for."""
    box: dict[str, Any] = {}

    def poll() -> tuple[bool, str]:
        box["run"] = client.get(f"/v1/training/runs/{run_id}")
        return box["run"]["state"] in TERMINAL + ("PAUSED",), progress_line(box["run"])

    wait_for(poll, interval=1.0, timeout=timeout)
    return box["run"]


def follow_run(client: Client, run_id: str, output: str) -> dict[str, Any]:
    """``--wait``: progress on stderr when the answer goes to stdout as JSON."""
    import contextlib
    import sys

    if output == "json":
        with contextlib.redirect_stdout(sys.stderr):
            return wait_for_run(client, run_id)
    return wait_for_run(client, run_id)


def print_run(run: dict[str, Any], wide: bool) -> None:
    """A run in three parts: state, results and cost (seeds/001)."""
    r, c = run["results"], run["cost"]
    console.print("[bold]State[/bold]")
    print_kv(
        [
            ("Run", run["id"]),
            ("Project", run["project"]),
            ("State", run["state"]),
            *[
                (label, run.get(key))
                for label, key in (
                    ("Phase", "phase"),
                    ("Queue reason", "queueReason"),
                    ("Failure", "failure"),
                )
                if run.get(key)
            ],
            ("Base model", run["baseModel"]),
            ("Dataset", run["dataset"]),
            ("Validation dataset", run.get("validationDataset")),
            (
                "Branch from",
                "{run} at {snapshot}".format(**run["branchFrom"])
                if run.get("branchFrom")
                else None,
            ),
            *([("Warm start", run["warmStartModelId"])] if run.get("warmStartModelId") else []),
            ("Config hash", run["configHash"][:16] if run.get("configHash") else None),
        ]
    )
    console.print("[bold]Results[/bold]")
    print_kv(
        [
            ("Model", r.get("model")),
            ("Step", f"{r.get('step')}/{r.get('totalSteps') or '?'}"),
            ("Last saved step", r.get("lastSavedStep")),
            ("Final loss", _fmt(r.get("finalLoss"))),
            ("Mean loss", _fmt(r.get("meanLoss"))),
            ("Validation loss", _fmt(r.get("validationLoss"))),
            ("Tokens/s", _fmt(r.get("tokensPerSecond"))),
            ("Adapted modules", ", ".join(r.get("adaptedModules") or []) or None),
        ]
    )
    console.print("[bold]Cost[/bold]")
    print_kv(
        [
            ("Device", c["device"]),
            ("Wall time", f"{c['wallSeconds']}s"),
            ("Device time", f"{c['deviceSeconds']}s"),
            ("Trained tokens", c.get("trainedTokens")),
        ]
    )
    if wide and run.get("settings"):
        console.print("[bold]Settings[/bold] (* = stated by the plan)")
        from .runs_format import settings_lines  # noqa: PLC0415

        for line in run["settings"].get("settingsText") or settings_lines(run["settings"]):
            console.print(line, highlight=False, markup=False)


@app.command("get")
def get(
    run_id: str,
    output: OutputOpt = "text",
    settings: Annotated[bool, typer.Option("--settings", help="Add the run's settings.")] = False,
    checks: Annotated[bool, typer.Option("--checks", help="Show checks before training.")] = False,
) -> None:
    """Show a run: its state, results and cost.

    Example: {prog} training runs get 970076e8 --settings
    """
    wide = settings or output == "wide"
    run = Client().get(f"/v1/training/runs/{run_id}", params={"settings": wide})
    if checks:
        run["checks"] = run["results"].get("checks") or []
    emit(run, output, lambda d, w: print_run(d, wide))
    if checks and output != "json":
        if run["checks"]:
            print_table(
                run["checks"],
                [("CHECK", "name"), ("VALUE", "value"), ("BOUND", "bound"), ("PASSED", "passed")],
            )
        else:
            console.print(
                "Checks: none ran. Checks before the first update (output head, packing "
                "isolation, loss with and without packing, comparison with plain Transformers) "
                "run on supervised runs on more than one device.",
                highlight=False,
                markup=False,
            )


@app.command("list")
def list_(
    output: OutputOpt = "text",
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
) -> None:
    """List runs, newest first.

    Example: {prog} training runs list --project triage
    """
    data = Client().get("/v1/training/runs", params={"project": project} if project else None)

    def text(d: dict, wide: bool) -> None:
        rows = [
            {
                **r,
                "short": r["id"][:8],
                "step": f"{r['results']['step']}/{r['results']['totalSteps'] or '?'}",
                "model": r["results"]["model"],
                "loss": _fmt(r["results"]["finalLoss"]),
                "note": r.get("queueReason") or r.get("failure") or "",
            }
            for r in d["runs"]
        ]
        print_table(
            rows,
            [
                ("RUN", "short"),
                ("PROJECT", "project"),
                ("STATE", "state"),
                ("STEP", "step"),
                ("LOSS", "loss"),
                ("MODEL", "model"),
                ("NOTE", "note"),
            ],
        )

    emit(data, output, text)


@app.command("wait")
def wait(
    run_id: str,
    output: OutputOpt = "text",
    timeout: Annotated[float | None, typer.Option(help="Give up after seconds.")] = None,
) -> None:
    """Wait for a run to end; exits non-zero unless it SUCCEEDED.

    Example: {prog} training runs wait 970076e8
    """
    run = wait_for_run(Client(), run_id, timeout)
    emit(run, output, lambda d, w: print_run(d, w))
    if run["state"] != "SUCCEEDED":
        raise CliError(f"Run {run['id']} ended {run['state']}: {run.get('failure') or ''}".strip())


@app.command("metrics")
def metrics(run_id: str, output: OutputOpt = "text") -> None:
    """Per-update metrics: loss, learning rate, gradient norm, clip factor, adapter norm,
    update ratio, tokens; and validation loss and perplexity.

    Example: {prog} training runs metrics 970076e8 -o json
    """
    data = Client().get(f"/v1/training/runs/{run_id}/metrics")

    def text(d: dict, wide: bool) -> None:
        rows = [{k: _fmt(v) for k, v in m.items()} for m in d["metrics"]]
        print_table(
            rows,
            [
                ("STEP", "step"),
                ("LOSS", "loss"),
                ("LR", "learningRate"),
                ("GRAD NORM", "gradNorm"),
                ("CLIP", "gradClipFactor"),
                ("ADAPTER NORM", "adapterNorm"),
                ("UPDATE RATIO", "updateRatio"),
                ("SUP TOKENS", "supervisedTokens"),
                ("TOKENS", "totalTokens"),
                ("TOK/S", "tokensPerSecond"),
                ("STEP S", "stepTimeSeconds"),
            ],
        )
        if d["validation"]:
            console.print("Validation")
            print_table(
                [{k: _fmt(v) for k, v in m.items()} for m in d["validation"]],
                [
                    ("STEP", "step"),
                    ("LOSS", "loss"),
                    ("PERPLEXITY", "perplexity"),
                    ("SUP TOKENS", "supervisedTokens"),
                ],
            )
        console.print(f"finalLoss {_fmt(d['finalLoss'])}  meanLoss {_fmt(d['meanLoss'])}")

    emit(data, output, text)


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

    def text(d: dict, wide: bool) -> None:
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
                }
                for w in d["windows"]
            ],
            [
                ("STEPS", "steps"),
                ("RUN MEAN", "run"),
                ("BASELINE MEAN", "baseline"),
                ("DIFFERENCE", "diff"),
                ("FULL", "full"),
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
                f"No full window differs by more than {_fmt(d['margin'])} "
                f"({d['fullWindows']} judged)."
            )
        else:
            console.print(
                f"First full window past the margin: updates {w['first']}-{w['last']}, "
                f"mean difference {w['meanDifference']:+.4g} (margin {_fmt(d['margin'])})."
            )

    emit(data, output, text)


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
        bool, typer.Option("--compare", help="Score the source against the fan (not built).")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for every branch.")] = False,
    output: OutputOpt = "text",
) -> None:
    """Submit one branch per grid point from one snapshot of a run.

    Example: {prog} training runs sweep 970076e8 --snapshot step-4000 --steps 200 --grid learning-rate.json --dataset triage-val
    """
    from pathlib import Path

    try:
        points = json.loads(Path(grid).read_text())
    except OSError as exc:
        raise CliError(f"Cannot read the grid file {grid}: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{grid} line {exc.lineno} column {exc.colno}: not valid JSON: {exc.msg}."
        ) from exc
    client = Client()
    body = {"snapshot": snapshot, "steps": steps, "grid": points, "dataset": dataset}
    if compare:
        body["compare"] = True
    data = client.post(f"/v1/training/runs/{run_id}/sweep", json=body)
    if wait:
        for p in data["points"]:
            p["run"] = follow_run(client, p["run"]["id"], output)

    def text(d: dict, wide: bool) -> None:
        n, k = len(d["points"]), d["steps"]
        console.print(
            f"Sweep of run {d['source']} from {d['snapshot']}: {n} branch{'es' if n != 1 else ''} "
            f"of {k} update{'s' if k != 1 else ''}"
        )
        points = list(d["points"])
        scored = [p["run"]["results"]["validationLoss"] for p in points]
        if all(v is not None for v in scored):  # best validation loss first
            points.sort(key=lambda p: p["run"]["results"]["validationLoss"])
            console.print("Ranked by validation loss, best first.")
        print_table(
            [
                {
                    "run": p["run"]["id"][:8],
                    "point": " ".join(
                        f"{k.rsplit('.', 1)[-1]}={json.dumps(v)}" for k, v in p["point"].items()
                    ),
                    "state": p["run"]["state"],
                    "loss": _fmt(p["run"]["results"]["finalLoss"]),
                    "val": _fmt(p["run"]["results"]["validationLoss"]),
                    "model": p["run"]["results"]["model"],
                }
                for p in points
            ],
            [
                ("RUN", "run"),
                ("POINT", "point"),
                ("STATE", "state"),
                ("FINAL LOSS", "loss"),
                ("VAL LOSS", "val"),
                ("MODEL", "model"),
            ],
        )

    emit(data, output, text)


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


__all__ = ["app", "snapshots_app", "wait_for_run", "progress_line", "prog"]
