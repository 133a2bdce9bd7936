"""The package's modules import one way: no file imports itself back through others.

Walks every module of ``src/akka_optimize`` with :mod:`ast` (no import is executed), collects
each ``import`` and ``from ... import`` at any depth — inside functions too, since a lazy
import that closes a circle is still a circle — and fails listing every cycle found.

An import of a package (``from akka_optimize.jobs import x``) counts as an import of the
package's ``__init__`` and, where ``x`` is a submodule, of that submodule. Imports guarded by
``if TYPE_CHECKING:`` count too: DESIGN.md "Layout" says no two files import each other,
whatever the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "akka_optimize"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_name(path: Path) -> str:
    """Dotted module name of a file under ``src/`` (``__init__.py`` names its package)."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve_relative(current: str, is_package: bool, level: int, module: str | None) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(target: str) -> None:
        # ``import a.b.c`` also imports ``a`` and ``a.b``; only the deepest module known counts
        # as the edge (a package ``__init__`` of the project's own is nearly empty by design).
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(name, is_package, node.level, node.module)
            else:
                base = node.module or ""
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base)
    return found


def import_graph() -> dict[str, set[str]]:
    """The module import graph of the package: module name -> modules it imports."""
    modules = all_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules, each as one cycle path.

    Tarjan's algorithm finds the groups; within each, a breadth-first search from its first
    module back to itself names one concrete circle so the failure message can be acted on.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)

    return [group + [" -> ".join(_circle_through(graph, group))] for group in sorted(groups)]


def _circle_through(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """One shortest circle from the group's first module back to itself, inside the group."""
    members = set(group)
    start = group[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in previous:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    path = [start]
    node = previous[start]
    while node != start:
        path.append(node)
        node = previous[node]
    path.append(start)
    return list(reversed(path))


def test_cycle_finder_reports_a_lazy_circle_and_passes_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a -> b -> c -> a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_import_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .other import thing\n    return thing\n")
    found = imports_of("akka_optimize.pkg.m", source, {"akka_optimize.pkg.other"})
    assert found == {"akka_optimize.pkg.other"}


def test_the_package_has_no_import_circles() -> None:
    found = cycles(import_graph())
    listing = "\n".join(f"  {{{', '.join(group[:-1])}}}: {group[-1]}" for group in found)
    assert not found, f"{len(found)} import circle(s) in src/{PACKAGE}:\n{listing}"


def package_of(module: str) -> str:
    """The package a module belongs to: ``akka_optimize.jobs.mapping`` → ``jobs``; a module
    directly under ``akka_optimize`` is its own (``akka_optimize.refs`` → ``refs``); the
    package's ``__init__`` is ``akka_optimize``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package → the other packages its modules import (``import_graph`` folded)."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = package_of(module)
        out.setdefault(mine, set()).update(package_of(t) for t in targets)
        out[mine].discard(mine)
    return out


README = Path(__file__).resolve().parents[1] / "README.md"
ARROWS_MARK = "package: packages it may import"


def allowed_arrows() -> dict[str, set[str]]:
    """The arrows README's Layout allows: the fenced block whose first line holds
    :data:`ARROWS_MARK`, one ``package: a b c`` line per package."""
    text = README.read_text(encoding="utf-8")
    start = text.index(ARROWS_MARK)
    block = text[start : text.index("```", start)].splitlines()[1:]
    out: dict[str, set[str]] = {}
    for line in block:
        if line.strip():
            name, _, targets = line.partition(":")
            out[name.strip()] = set(targets.split())
    return out


def test_package_graph_folds_modules_into_packages() -> None:
    graph = {
        "akka_optimize.a.x": {"akka_optimize.b.y", "akka_optimize.a.z"},
        "akka_optimize.r": set(),
    }
    assert package_graph(graph) == {"a": {"b"}, "r": set()}


def test_the_packages_have_no_import_circles() -> None:
    found = cycles(package_graph(import_graph()))
    listing = "\n".join(f"  {{{', '.join(group[:-1])}}}: {group[-1]}" for group in found)
    assert not found, f"{len(found)} circle(s) between the packages of src/{PACKAGE}:\n{listing}"


def test_every_package_import_is_an_arrow_readme_allows() -> None:
    """README's Layout lists, per package, the packages it may import; an import along an
    arrow it does not list fails here (add the arrow there, or import the other way), and
    so does a package it does not list. The allowed arrows have no circle themselves."""
    allowed = allowed_arrows()
    graph = package_graph(import_graph())
    unlisted = sorted(set(graph) - set(allowed))
    assert not unlisted, f"packages README's Layout does not list: {unlisted}"
    extra = [f"{p} -> {t}" for p in sorted(graph) for t in sorted(graph[p] - allowed[p])]
    assert not extra, "imports README's Layout does not allow:\n  " + "\n  ".join(extra)
    stale = sorted(set(allowed) - set(graph))
    assert not stale, f"README's Layout lists packages that do not exist: {stale}"
    assert not cycles({p: allowed[p] & set(allowed) for p in allowed})
