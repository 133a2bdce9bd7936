"""``training runs get|list|wait|metrics``: reading runs. ``runs start`` lives in
:mod:`.runs`; lineage commands in :mod:`.run_lineage`; snapshots and control in
:mod:`.run_states` (``main`` imports the three in that order, which is the order of
``training runs --help``)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..client import Client
from ..context import CliError
from ..output import OutputOpt, console, emit, print_table
from .follow import wait_for_run
from .settings_text import fmt as _fmt
from .settings_text import print_run
from .start import app


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
                [
                    ("CHECK", "name"),
                    ("VALUE", "value"),
                    ("BOUND", "bound"),
                    ("PASSED", "passed"),
                    ("SETTING", "setting"),
                ],
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


PREFERENCE_COLUMNS = [
    ("CHOSEN", "rewards/chosen"),
    ("REJECTED", "rewards/rejected"),
    ("MARGIN", "rewards/margin"),
    ("ACCURACY", "rewards/accuracy"),
]
"""A preference run's reward columns (``rewards/…``, means over the update's pairs)."""


@app.command("metrics")
def metrics(run_id: str, output: OutputOpt = "text") -> None:
    """Per-update metrics: loss, learning rate, gradient norm, clip factor, adapter norm,
    update ratio, tokens (a preference run adds its rewards: chosen, rejected, margin,
    accuracy); and validation loss and perplexity (or rewards). A reinforcement run adds its
    rewards, KL, the sampler–trainer log-prob gap and each update's staleness.

    Example: {prog} training runs metrics 970076e8 -o json
    """
    data = Client().get(f"/v1/training/runs/{run_id}/metrics")

    def text(d: dict, wide: bool) -> None:
        rows = [{k: _fmt(v) for k, v in m.items()} for m in d["metrics"]]
        rl = any("rewardMean" in m for m in d["metrics"])
        reward = [("REWARD", "rewardMean"), ("REWARD STD", "rewardStd"),
                  ("ZERO-ADV", "zeroAdvantageGroupShare"), ("KL", "approxKl"),
                  ("CLIPPED", "clippedTokenShare"), ("LENGTH", "completionLength"),
                  ("LOGP GAP MAX", "logprobDiffMax"), ("STALE", "staleness")]  # fmt: skip
        dpo = any("rewards/accuracy" in m for m in d["metrics"])  # a preference run
        print_table(
            rows,
            [
                ("STEP", "step"),
                *(reward if rl else []),
                *(PREFERENCE_COLUMNS if dpo else []),
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
        for m in d["metrics"]:  # a reinforcement update that trained nothing says why
            if m.get("skipReason"):
                console.print(f"Update {m['step']} trained nothing: {m['skipReason']}.")
        if d["validation"]:
            console.print("Validation")
            print_table(
                [{k: _fmt(v) for k, v in m.items()} for m in d["validation"]],
                [
                    ("STEP", "step"),
                    ("LOSS", "loss"),
                    *(PREFERENCE_COLUMNS if dpo else [("PERPLEXITY", "perplexity")]),
                    ("SUP TOKENS", "supervisedTokens"),
                ],
            )
        console.print(f"finalLoss {_fmt(d['finalLoss'])}  meanLoss {_fmt(d['meanLoss'])}")

    emit(data, output, text)


@app.command("samples")
def samples(
    run_id: str,
    step: Annotated[int | None, typer.Option("--step", help="One update only.")] = None,
    output: OutputOpt = "text",
) -> None:
    """A reinforcement run's samples per update: prompt, completion, reward, advantage.

    Example: {prog} training runs samples 970076e8 --step 3
    """
    path = f"/v1/training/runs/{run_id}/samples" + (f"?step={step}" if step else "")
    data = Client().get(path)

    def text(d: dict, wide: bool) -> None:
        if not d["updates"]:
            console.print("No samples (a reinforcement run records them at each update).")
        for u in d["updates"]:
            console.print(f"Update {u['step']}", highlight=False)
            for s in u["samples"]:
                err = f"  error: {s['error']}" if s.get("error") else ""
                console.print(
                    f"  row {s['row'] + 1}  reward {_fmt(s['reward'])}  advantage "
                    f"{_fmt(s['advantage'])}{err}\n    prompt: {s['prompt'][:120]!r}\n"
                    f"    completion: {s['completion'][:200]!r}",
                    highlight=False,
                    markup=False,
                )

    emit(data, output, text)


@app.command("grafana")
def grafana(
    run_id: str,
    platform_project: Annotated[
        str,
        typer.Option(
            "--platform-project",
            help="The platform project the dashboard selects (--project names a training "
            "project everywhere else).",
        ),
    ],
    output: OutputOpt = "text",
) -> None:
    """Print the link to the run's panel in the deployment's Grafana (grafana.url of the
    deployment file); refused with a sentence when the deployment names no Grafana.

    Example: {prog} training runs grafana 970076e8 --platform-project my-platform-project
    """
    data = Client().get(
        f"/v1/training/runs/{run_id}/grafana", params={"platformProject": platform_project}
    )
    emit(data, output, lambda d, w: print(d["url"]))
