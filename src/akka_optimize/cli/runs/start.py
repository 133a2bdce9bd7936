"""``training runs`` commands.

This module holds ``training runs start -f PLAN [--dry-run [--show-resolved]]`` (the
run-plan issue: :func:`read_plan_file`, :func:`post_plan`, :func:`print_dry_run`,
:func:`print_refusals`); the other runs commands join it beside these functions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from ..client import Client, retrying_503, with_prog
from ..context import CliError, prog
from ..output import check_format, console
from .follow import follow_run

app = typer.Typer(
    help="Training runs: start from a plan, follow, inspect.\n\n"
    "Example: {prog} training runs start -f plan.json --dry-run",
    no_args_is_help=True,
)


# -- training runs start: plan files, dry run, refusals --------------------------------
def read_plan_file(path: Path) -> Any:
    """Read a plan from a JSON (or ``.yaml``/``.yml``) file.

    Raises:
        CliError: the file is missing or not valid JSON/YAML; the message names the file
            and the line.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"Cannot read the plan file {path}: {exc.strerror or exc}.") from exc
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            raise CliError(f"{path}{where}: not valid YAML: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})."
        ) from exc


def post_plan(plan: Any, dry_run: bool) -> tuple[int, dict[str, Any]]:
    """POST the plan to ``/v1/training/runs`` and return ``(status, body)`` without
    raising on a refusal, so every refusal can be printed."""
    client = Client("trainer")
    params = {"dryRun": "true"} if dry_run else None
    try:
        r = retrying_503(
            lambda: httpx.post(
                client.url + "/v1/training/runs",
                json=plan,
                params=params,
                headers=client.headers(),
                timeout=client.timeout,
            )
        )
    except httpx.ConnectError as exc:
        raise CliError(
            f"Cannot reach the service at {client.url}. Start it with "
            f"`{prog()} server start`, or set AKKA_OPTIMIZE_URL."
        ) from exc
    try:
        body = r.json()
    except ValueError:
        body = {"error": {"message": r.text.strip()[:500] or f"HTTP {r.status_code}"}}
    return r.status_code, body


def print_refusals(error: dict[str, Any], start: bool = False) -> None:
    """Every refusal of a refused plan, one per line, on stderr; with ``start``, those of
    a dry run whose plan resolves but whose start would be refused."""
    details = error.get("details") or []
    if isinstance(details, list) and details and all(isinstance(d, dict) for d in details):
        n = len(details)
        what = "The start would be refused" if start else "The plan is refused"
        print(f"{what} ({n} {'reason' if n == 1 else 'reasons'}):", file=sys.stderr)
        for d in details:
            print(f"  - {with_prog(str(d.get('message')))}", file=sys.stderr)
    else:
        print(f"Error: {with_prog(str(error.get('message')))}", file=sys.stderr)


def print_dry_run(report: dict[str, Any], show_resolved: bool) -> None:
    """The dry run as text: hash, identity, pinned references, settings one line per group
    (all of them with ``--show-resolved``, else only the stated values), findings."""
    if report.get("accepted") is False:
        print("Dry run: the plan resolves but a start would be refused; nothing was created.")
    else:
        print("Dry run: the plan is accepted; nothing was created.")
    print(f"Configuration hash: {report['configHash']}")
    ex = report["resolved"]["execution"]
    print(f"Project: {report['project']}   Method: {report['method']}")
    print(f"Base model: {report['baseModel']}   Registers: {report['modelName']}")
    print(f"Devices: {ex['gpus']} x {report['deviceProfile']}")
    for path, ref in report.get("pinned", {}).items():
        print(f"{path}: {ref}")
    lines = report.get("settings", [])
    if show_resolved:
        print("Resolved settings (* = stated by the plan):")
        for line in lines:
            console.print(f"  {line['text']}", highlight=False, markup=False)
    else:
        stated = [(line["group"], [v for v in line["values"] if v["stated"]]) for line in lines]
        stated = [(g, vs) for g, vs in stated if vs]
        if stated:
            print("Stated settings (--show-resolved shows every setting):")
        for group, values in stated:
            text = " ".join(f"{v['key']}={json.dumps(v['value'])}" for v in values)
            console.print(f"  {group}: {text}", highlight=False, markup=False)
    if report.get("findings"):
        print_findings(report["findings"])


def print_findings(f: dict[str, Any], file: Any = None) -> None:
    """Dataset findings of a dry run: rows, duplicates, rows that do not fit or train
    (on ``file``, standard output by default)."""
    out = file or sys.stdout
    print(f"Dataset findings for {f.get('dataset')}:", file=out)
    line = f"  rows: {f.get('rows')}"
    if "trainable_pairs" in f:
        line += f", trainable pairs: {f['trainable_pairs']}"
    elif "trainable_rows" in f:
        line += f", trainable: {f['trainable_rows']}"
    print(line, file=out)
    if f.get("sampled"):  # above the findings' bound (data/findings.py FINDINGS_SAMPLE_ROWS)
        s = f["sampled"]
        print(f"  sampled: {s['rows']} of {s['of']} rows ({s['why']})", file=out)
    labels = {
        "exact_duplicates": "exact duplicates (row groups)",
        "near_duplicates": "near duplicates (row groups)",
        "truncated_rows": f"rows longer than maxSeqLength {f.get('max_seq_length')}",
        "no_supervised_rows": "rows that train no token",
        "refused_rows": "rows training refuses (template, or a turn's prompt)",
    }
    for key, label in labels.items():
        values = f.get(key) or []
        if values:
            count = f.get(f"{key}_count", len(values))
            print(f"  {label}: {count}: {json.dumps(values[:10])}", file=out)
    warnings = f.get("warnings") or []
    if warnings:
        print(f"  warnings: {f.get('warnings_count', len(warnings))}", file=out)
        for w in warnings[:5]:
            print(f"    {w}", file=out)
    if f.get("tokenFindings") is not True and f.get("tokenFindings"):
        print(f"  ({f['tokenFindings']})", file=out)


@app.command("start")
def start(
    file: Path = typer.Option(..., "--file", "-f", help="The run plan (JSON or YAML)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Resolve and check the plan; create nothing."
    ),
    show_resolved: bool = typer.Option(
        False, "--show-resolved", help="With --dry-run, print every resolved setting."
    ),
    output: str = typer.Option("text", "--output", "-o", help="Output format: text, json or wide."),
    wait: bool = typer.Option(
        False, "--wait", help="Follow the run until it ends; exit non-zero unless it SUCCEEDED."
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Start without asking after the dataset findings."
    ),
) -> None:
    """Start a run from a plan, or check it with --dry-run.

    Before a start the dataset findings of the version the run would train on are printed
    (duplicates, rows longer than maxSeqLength, rows that train nothing); on a terminal the
    command then asks whether to start, unless --yes. Without a terminal (a script, CI) it
    prints them and starts. With -o json nothing is asked or printed before the start.

    Example: {prog} training runs start -f plan.json --dry-run --show-resolved
    Example: {prog} training runs start -f plan.json --wait
    """
    check_format(output)
    plan = read_plan_file(file)
    if not dry_run and output != "json":
        status, report = post_plan(plan, True)  # the findings, and a refusal, before a start
        if status < 400 and report.get("accepted") is not False and report.get("findings"):
            print_findings(report["findings"], sys.stderr)
            if not yes and sys.stdin.isatty() and sys.stdout.isatty():
                if not typer.confirm("Start the run?", default=True):
                    print("Not started.", file=sys.stderr)
                    raise typer.Exit(1)
    status, body = post_plan(plan, dry_run)
    if status >= 400:
        if output == "json":
            sys.stdout.write(json.dumps(body, indent=2) + "\n")
        else:
            print_refusals(body.get("error", {}))
        raise typer.Exit(1)
    if wait and not dry_run:
        body = follow_run(Client(), body["id"], output)
    if output == "json":
        sys.stdout.write(json.dumps(body, indent=2, default=str) + "\n")
    elif dry_run:
        print_dry_run(body, show_resolved or output == "wide")
    elif wait:
        print(
            f"Run {body['id']} {body['state']} at step {body['results'].get('step')}; "
            f"model {body['results'].get('model') or '-'}."
        )
    else:
        print(f"Run {body.get('id', '?')} {body.get('state', 'submitted')}.")
    if dry_run and body.get("accepted") is False:
        print_refusals({"details": body.get("refusals")}, start=True)
        raise typer.Exit(1)
    if wait and not dry_run and body.get("state") != "SUCCEEDED":
        print(
            f"Error: the run ended {body.get('state')}: {body.get('failure') or ''}",
            file=sys.stderr,
        )
        raise typer.Exit(1)
