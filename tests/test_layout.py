"""Modules and functions stay small enough to change (issue 20, ../shared/STYLE.md 6 and 9).

Every module of ``src/akka_optimize`` stays under about 400 lines and every function under
80. Alembic migrations are exempt: a migration is one ``upgrade()`` listing the schema as it
was at that revision, and it is never edited after it ships.

The walk reads the files with :mod:`ast` and imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "akka_optimize"
MODULE_LINES = 420
"""Hard ceiling for a module; the aim is 400 ("about 400" in issue 20)."""
FUNCTION_LINES = 80
EXEMPT = ("db/migrations/",)


def _sources() -> list[Path]:
    return [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if not any(part in p.relative_to(ROOT).as_posix() for part in EXEMPT)
    ]


def long_functions(path: Path, limit: int = FUNCTION_LINES) -> list[str]:
    """``"file:line name (N lines)"`` for each function or method of ``path`` over ``limit``.

    A function's length runs from its ``def`` line (decorators excluded) to its last line, so
    its docstring counts.
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
                found.append(f"{rel}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_long_function_finder_counts_from_def_to_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    source = tmp_path / "m.py"
    source.write_text(f"def f():\n{body}\n\n\ndef g():\n    return 1\n")
    assert [line.split(" ", 1)[1] for line in long_functions(source, 80)] == ["f (82 lines)"]


def test_every_module_stays_under_the_line_ceiling() -> None:
    over = []
    for path in _sources():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MODULE_LINES:
            over.append(f"{path.relative_to(ROOT).as_posix()} ({lines} lines)")
    assert not over, f"modules over {MODULE_LINES} lines: split them by concern:\n" + "\n".join(
        over
    )


def test_every_function_stays_under_eighty_lines() -> None:
    over = [entry for path in _sources() for entry in long_functions(path)]
    assert not over, f"functions over {FUNCTION_LINES} lines:\n" + "\n".join(over)
