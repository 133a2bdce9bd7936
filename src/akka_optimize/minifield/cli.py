"""``minifield-worker``: list the installed strategies or run a direct recipe.

Usage::

    minifield-worker --list-strategies [-o text|json]
    minifield-worker run RECIPE.json [--output DIR] [--resume] [--attempt ID] [-o text|json]
    minifield-worker supervise --url URL --token TOKEN [--output DIR] [--once] [--wait S]
                               [--accept VERSION_OR_STRATEGY ...] [--device auto|cpu|cuda]

``run`` prints one line per event (``-o json``: the event objects, one per line) and exits
0 on success; a refused recipe prints ``error: SENTENCE`` on stderr and exits 1.
``supervise`` claims recipe runs from the service and trains them
(:mod:`akka_optimize.minifield.supervise`); with ``--once`` it claims at most one, exits 0
when none came within ``--wait`` seconds or the claimed run succeeded, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from akka_optimize.errors import AkkaError

from .registry import listing, listing_text
from .supervise import CLAIM_WAIT_S, event_line, supervise


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minifield-worker", description="Run versioned full-weight recipes (seeds/003)."
    )
    p.add_argument("--list-strategies", action="store_true", help="print the installed strategies")
    p.add_argument("-o", "--output-format", dest="fmt", choices=("text", "json"), default="text")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a direct recipe")
    run.add_argument("recipe", type=Path, help="the recipe JSON file")
    run.add_argument("--output", type=Path, default=None, help="output folder")
    run.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    run.add_argument("--attempt", default=None, help="this attempt's identity (default: random)")
    run.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="where to train"
    )
    run.add_argument(
        "-o", "--output-format", dest="run_fmt", choices=("text", "json"), default=None
    )
    sup = sub.add_parser("supervise", help="claim recipe runs from the service and train them")
    sup.add_argument("--url", required=True, help="the service's URL")
    sup.add_argument("--token", required=True, help="an admin or project token")
    sup.add_argument("--output", type=Path, default=Path("minifield-runs"), help="output folder")
    sup.add_argument("--once", action="store_true", help="claim at most one run, then exit")
    sup.add_argument(
        "--wait", type=float, default=CLAIM_WAIT_S, help="seconds each claim waits for work"
    )
    sup.add_argument(
        "--accept",
        action="append",
        default=None,
        help="advertise only this schema version or strategy name (repeatable; default all)",
    )
    sup.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``minifield-worker`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.list_strategies:
        out = json.dumps(listing(), indent=2) + "\n" if args.fmt == "json" else listing_text()
        sys.stdout.write(out)
        return 0
    if args.command == "supervise":
        try:
            return supervise(
                args.url,
                args.token,
                args.output,
                once=args.once,
                wait=args.wait,
                accept=args.accept,
                device=args.device,
                say=lambda line: print(line, flush=True),
            )
        except AkkaError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 1
    if args.command != "run":
        _parser().print_usage(sys.stderr)
        return 2
    fmt = args.run_fmt or args.fmt

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event, sort_keys=True) if fmt == "json" else event_line(event), flush=True)

    try:
        from .train import Worker  # lazy: guarded

        worker = Worker(args.recipe, args.output, emit, device=args.device)
        worker.run(resume=args.resume, attempt=args.attempt)
    except AkkaError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
