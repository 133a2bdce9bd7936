"""Both spellings everywhere (F137): ``akka training …``, ``akka registry …``, ``akka
optimize …`` and ``akka-optimize …`` reach the same commands; every command a hint, error
or help example names exists under each spelling; removed 0.7 commands name their
replacement."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
import typer

from akka_optimize.cli.main import akka, app
from akka_optimize.cli.removed import REMOVED
from helpers import BIN, LiveService

SRC = Path(__file__).resolve().parents[1] / "src" / "akka_optimize"
ROOTS = {"training", "registry", "server", "login", "config-schema"}
TREES = {"akka-optimize": app, "akka": akka}
_QUOTED = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.AST) -> str | None:
    """A string literal's text; in an f-string ``prog()`` reads ``{prog}`` and any other
    value ``VALUE``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            else:
                v = getattr(part, "value", None)
                is_prog = isinstance(v, ast.Call) and getattr(v.func, "id", "") == "prog"
                out.append("{prog}" if is_prog else "VALUE")
        return "".join(out)
    return None


def source_hints() -> list[tuple[str, str]]:
    """Every command quoted in a string the code shows a user (not docstrings):
    ``(file:line, command)``."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if id(node) in skip or id(node) in inner:
                continue
            text = _text(node)
            for m in _QUOTED.finditer(text or ""):
                found.append((f"{path.relative_to(SRC)}:{node.lineno}", m.group(1)))
    return found


def help_hints() -> list[tuple[str, str]]:
    """Every ``{prog} …`` example in the command tree's help texts."""
    found = []

    def walk(cmd, where: str) -> None:
        for attr in ("help", "epilog"):
            for m in re.finditer(r"\{prog\} ([^\n`]+)", getattr(cmd, attr, None) or ""):
                found.append((f"help of {where or 'akka-optimize'}", "{prog} " + m.group(1)))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, f"{where} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def _words(command: str) -> list[str] | None:
    """The command words of a quoted hint (after any prog prefix), or None when it does not
    name a command of this CLI."""
    words = command.split()
    for prefix in (["{prog}"], ["akka-optimize"], ["akka", "optimize"], ["akka"]):
        if words[: len(prefix)] == prefix:
            words = words[len(prefix) :]
            break
    if not words or words[0] not in ROOTS:
        return None
    out = []
    for w in words:
        if w.startswith(("-", "[", "{", "<")) or w in ("…", "VALUE") or not w.islower():
            break
        out.append(w)
    return out


_COMMANDS: dict[int, object] = {}


def _missing(tree: typer.Typer, words: list[str]) -> str | None:
    """The first word that is not a command under ``tree``, or None."""
    if id(tree) not in _COMMANDS:  # building the click tree is the slow part: once per tree
        _COMMANDS[id(tree)] = typer.main.get_command(tree)
    cmd = _COMMANDS[id(tree)]
    for w in words:
        subs = getattr(cmd, "commands", None)
        if not subs:
            return None  # a command: the rest are its arguments
        alternatives = w.split("|")
        if not all(a in subs for a in alternatives):
            return w
        cmd = subs[alternatives[0]]
    return None


def test_every_command_a_hint_or_help_names_exists_under_each_spelling() -> None:
    hints = source_hints() + help_hints()
    removed = {" ".join(p) for p, _ in REMOVED}
    checked, bad = 0, []
    for where, command in hints:
        words = _words(command)
        if words is None:
            continue
        if any(" ".join(words).startswith(r) for r in removed) and "{prog}" not in command:
            continue  # names the removed command itself, as in "`training workloads` is now"
        checked += 1
        for spelling, tree in TREES.items():
            w = _missing(tree, words)
            if w is not None:
                bad.append(f"{where}: `{command}` has no {w!r} under {spelling}")
    assert checked > 40, checked  # the collection found the hints
    assert bad == []


def test_a_missing_command_is_reported() -> None:
    """The checker itself: a hint naming a command that does not exist fails it."""
    assert _missing(app, ["training", "workloads", "list"]) == "workloads"
    assert _missing(akka, ["training", "runs", "get|lsit"]) == "get|lsit"
    assert _missing(akka, ["training", "runs", "start"]) is None


@pytest.mark.parametrize(
    "args, replacement",
    [
        (("training", "workloads", "list"), "training projects list"),
        (("datasets", "create", "x"), "registry datasets register NS/NAME -f FILE"),
        (("trained-models", "list"), "registry models get REF"),
        (("training", "bundles", "push", "-d", "x"), "registry bundles register NS/NAME -f DIR"),
    ],
)
def test_removed_commands_name_their_replacement(
    shared_service: LiveService, args: tuple[str, ...], replacement: str
) -> None:
    for prog, shown in (("akka-optimize", "akka-optimize"), ("akka", "akka optimize")):
        out = shared_service.cli(*args, prog=prog)
        assert out.returncode == 2, out.stderr
        assert f"`{shown} {replacement}" in out.stderr
        tokens = _words(f"{shown} {replacement}")
        assert tokens is not None and _missing(app, tokens) is None


def test_workload_flag_names_project(shared_service: LiveService) -> None:
    out = shared_service.cli("training", "runs", "list", "--workload", "demo")
    assert out.returncode == 2 and "--workload was renamed --project" in out.stderr


def _run(svc: LiveService, argv: list[str]) -> subprocess.CompletedProcess:
    cmd = [str(BIN / argv[0]), *argv[1:]]
    return subprocess.run(cmd, env=svc.env(), capture_output=True, text=True, timeout=120)


def test_akka_training_and_registry_reach_the_same_commands(shared_service: LiveService) -> None:
    """``akka training …`` (0.8 examples) works, and its hints say ``akka``."""
    shared_service.cli("training", "projects", "create", "demo", check=True)
    for cmd in (["akka", "optimize"], ["akka"], ["akka-optimize"]):
        out = _run(shared_service, cmd + ["training", "projects", "list", "-o", "json"])
        assert out.returncode == 0 and '"demo"' in out.stdout, (cmd, out.stderr)
        out = _run(shared_service, cmd + ["registry", "models", "list", "-o", "json"])
        assert out.returncode == 0, (cmd, out.stderr)
    out = _run(shared_service, ["akka", "training", "runs", "start", "-f", "/nonexistent.json"])
    assert out.returncode != 0 and "akka optimize" not in out.stderr
    out = _run(shared_service, ["akka", "training", "base-models", "select", "nobody/none"])
    assert out.returncode == 1
    assert "akka training base-models list --all" in out.stderr, out.stderr
