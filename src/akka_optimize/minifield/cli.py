"""``minifield-worker``: list the installed strategies or run a direct recipe.

Usage::

    minifield-worker --list-strategies [-o text|json]
    minifield-worker run RECIPE.json [--output DIR] [--resume] [--attempt ID] [-o text|json]

``run`` prints one line per event (``-o json``: the event objects, one per line) and exits
0 on success; a refused recipe prints ``error: SENTENCE`` on stderr and exits 1.
Supervised mode (claiming recipe jobs from the service) is not part of this release.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from akka_optimize.errors import AkkaError

from .registry import listing, listing_text


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
    return p


def _line(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "step":
        return (
            f"step {event['step']}: loss {event['loss']:.4f}  grad_norm {event['grad_norm']:.4f}  "
            f"update_norm {event['update_norm']:.3g}  tokens {event['input_tokens']} "
            f"(supervised {event['supervised_tokens']})  {event['step_time_s']:.2f} s"
        )
    if kind == "start":
        return (
            f"{event['strategy']} {event['computation']} ({event['implementation']}): "
            f"identity {event['computation_identity'][:16]}…, updates {event['step'] + 1}–{event['updates']}"
        )
    if kind == "checkpoint":
        return f"checkpoint after update {event['step']}: {event['path']}"
    return f"done: {event.get('final')}" + (
        f", export {event['export']}" if "export" in event else ""
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``minifield-worker`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.list_strategies:
        out = json.dumps(listing(), indent=2) + "\n" if args.fmt == "json" else listing_text()
        sys.stdout.write(out)
        return 0
    if args.command != "run":
        _parser().print_usage(sys.stderr)
        return 2
    fmt = args.run_fmt or args.fmt

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event, sort_keys=True) if fmt == "json" else _line(event), flush=True)

    try:
        from .train import Worker

        worker = Worker(args.recipe, args.output, emit, device=args.device)
        worker.run(resume=args.resume, attempt=args.attempt)
    except AkkaError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
