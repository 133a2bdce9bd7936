"""Output: ``-o text|json|wide`` for every command, tables, and ``--wait`` progress."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .context import CliError

console = Console(soft_wrap=True)
err_console = Console(stderr=True)

OutputOpt = Annotated[
    str,
    typer.Option("--output", "-o", help="Output format: text, json or wide."),
]


def check_format(fmt: str) -> str:
    """Validate an ``-o`` value (usage error, exit 2, when unknown)."""
    if fmt not in ("text", "json", "wide"):
        raise CliError(f"-o/--output must be text, json or wide, not {fmt!r}.", exit_code=2)
    return fmt


def emit(data: Any, fmt: str, text: Callable[[Any, bool], None]) -> None:
    """Print ``data`` as JSON for ``-o json``, else through ``text(data, wide)``."""
    check_format(fmt)
    if fmt == "json":
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        text(data, fmt == "wide")


def print_table(rows: Iterable[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """A table of ``rows`` with ``columns`` as ``(header, key)`` pairs."""
    t = Table(show_edge=False, box=None, pad_edge=False)
    for header, _ in columns:
        t.add_column(header)
    n = 0
    for r in rows:
        t.add_row(*["" if r.get(k) is None else str(r.get(k)) for _, k in columns])
        n += 1
    if n == 0:
        console.print("(none)")
    else:
        # Never fold digests or pinned references when piped: tables take their natural width.
        Console(width=max(console.width, 400) if not console.is_terminal else None).print(t)


def print_kv(pairs: Iterable[tuple[str, Any]]) -> None:
    """``key: value`` lines, aligned."""
    items = list(pairs)
    w = max((len(k) for k, _ in items), default=0)
    for k, v in items:
        console.print(f"{k.ljust(w)}  {'' if v is None else v}", highlight=False, markup=False)


def wait_for(
    poll: Callable[[], tuple[bool, str]], *, interval: float = 1.0, timeout: float | None = None
) -> None:
    """Poll until ``poll()`` returns ``(True, line)``.

    On a terminal: a spinner with the elapsed time and the latest line. Otherwise
    one printed line per milestone (each time the line changes) — seeds/000
    "Capacity and waiting". Progress goes to standard error, so standard output
    holds only the command's answer (``-o json`` stays parseable).
    """
    start = time.monotonic()
    last = None
    if sys.stderr.isatty():
        with err_console.status("") as status:
            while True:
                done, line = poll()
                el = time.monotonic() - start
                status.update(f"{line}  [{el:,.0f}s]")
                if done:
                    break
                if timeout and el > timeout:
                    raise CliError(f"Gave up waiting after {timeout:.0f}s: {line}")
                time.sleep(interval)
        err_console.print(line, highlight=False, markup=False)
        return
    while True:
        done, line = poll()
        if line != last:
            el = time.monotonic() - start
            print(f"[{el:6.0f}s] {line}", file=sys.stderr, flush=True)
            last = line
        if done:
            return
        if timeout and time.monotonic() - start > timeout:
            raise CliError(f"Gave up waiting after {timeout:.0f}s: {line}")
        time.sleep(interval)
