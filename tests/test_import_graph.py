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
import re
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


# Issue 49 item 4: imports at the module's top unless a comment says why, names two modules
# share are public, and a re-export stays only where something reads it.
# scripts/refactor_private_names.py rewrites the tree to these rules.

REPO = Path(__file__).resolve().parents[1]
READERS = ("src", "tests", "benchmarks", "examples")


def project_from(name: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The project module an ``ImportFrom`` of module ``name`` reads, or None."""
    if node.level:
        return _resolve_relative(name, path.name == "__init__.py", node.level, node.module)
    mod = node.module or ""
    return mod if mod == PACKAGE or mod.startswith(PACKAGE + ".") else None


def test_no_module_imports_another_modules_private_names() -> None:
    """A name two modules share is public: ``from .x import _name`` fails here, and so does
    ``x._name`` where ``x`` is another module of the project."""
    modules = set(all_modules())
    found = []
    for name, path in all_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (source := project_from(name, path, node)):
                private = [a.name for a in node.names if a.name.startswith("_")]
                private = [p for p in private if not p.startswith("__")]
                if private:
                    found.append(f"{name}:{node.lineno} {', '.join(private)}")
                for a in node.names:
                    if f"{source}.{a.name}" in modules:
                        bound[a.asname or a.name] = f"{source}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in modules:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                other = module_of(node.value, bound, modules)
                if other and other != name and not node.attr.startswith("__"):
                    found.append(f"{name}:{node.lineno} {other}.{node.attr}")
    assert not found, "imports of another module's private names:\n  " + "\n  ".join(found)


def module_of(expr: ast.AST, bound: dict[str, str], modules: set[str]) -> str | None:
    """The project module an expression (``m``, ``a.b.c``) names, given the names ``bound``
    to modules."""
    if isinstance(expr, ast.Name):
        return bound.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = module_of(expr.value, bound, modules)
        if base and f"{base}.{expr.attr}" in modules:
            return f"{base}.{expr.attr}"
    return None


def names_read() -> set[tuple[str, str]]:
    """``(module, name)`` for every name some file of src, tests, benchmarks or examples
    reads from a project module: ``from m import name``, ``alias.name`` where ``alias`` is
    bound to ``m``, ``getattr(m, "name")``-like calls, and ``"m:name"`` / ``"m.name"``
    strings (a job kind's worker)."""
    modules = set(all_modules())
    out: set[tuple[str, str]] = set()
    for top in READERS:
        for path in sorted((REPO / top).rglob("*.py")):
            name = module_name(path) if top == "src" else ""
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            bound: dict[str, str] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in modules:
                            bound[a.asname or a.name.split(".")[0]] = (
                                a.name if a.asname else a.name.split(".")[0]
                            )
                elif isinstance(node, ast.ImportFrom) and (top == "src" or not node.level):
                    mod = project_from(name, path, node)
                    for a in node.names if mod else []:
                        if f"{mod}.{a.name}" in modules:
                            bound[a.asname or a.name] = f"{mod}.{a.name}"
                        else:
                            out.add((mod, a.name))

            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and (
                    mod := module_of(node.value, bound, modules)
                ):
                    out.add((mod, node.attr))
                elif isinstance(node, ast.Call) and len(node.args) >= 2:
                    mod, arg = module_of(node.args[0], bound, modules), node.args[1]
                    if mod and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        out.add((mod, arg.value))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for m in re.finditer(r"\b(akka_optimize(?:\.\w+)+)[:.](\w+)\b", node.value):
                        out.add((m.group(1), m.group(2)))
                        head, _, last = m.group(1).rpartition(".")
                        out.add((head, last))
    return out


def test_every_reexport_is_read_somewhere() -> None:
    """``from .x import name as name`` (the explicit re-export) stays only where another
    file reads ``name`` from this module, or its ``__all__`` lists it."""
    modules = all_modules()
    read = names_read()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        exported: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                exported = set(ast.literal_eval(node.value))
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            source = project_from(name, path, node)
            for a in node.names:
                if a.asname != a.name or a.name in exported or (name, a.name) in read:
                    continue
                if source and f"{source}.{a.name}" in modules:
                    continue  # a submodule bound on its package
                found.append(f"{name}:{node.lineno} {a.name}")
    assert not found, "re-exports nothing reads:\n  " + "\n  ".join(found)


def test_function_level_imports_of_the_project_say_why() -> None:
    """An import of a project module inside a function carries a comment (on its lines or
    the line above: a heavy dependency such as torch, a guard); any other moves to the top."""
    found = []
    for name, path in all_modules().items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    ours = project_from(name, path, node) is not None
                elif isinstance(node, ast.Import):
                    ours = any(a.name.startswith(PACKAGE + ".") for a in node.names)
                else:
                    continue
                own = lines[node.lineno - 1 : node.end_lineno]
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                if ours and not any("#" in ln for ln in own) and not above.startswith("#"):
                    found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    found = sorted(set(found))
    assert not found, "function-level imports with no comment saying why:\n  " + "\n  ".join(found)


# Issue 49 item 1: routers are thin (parse the request, call the core, shape the answer);
# the queries they answer with live in ``core/``.
ROUTERS = ROOT / "service" / "routers"


def test_no_router_imports_sqlalchemy_or_the_state_store() -> None:
    """No module under ``service/routers/`` imports SQLAlchemy or the state store's records
    (``akka_optimize.db``), at any depth, type-only imports too: a query, and a record read
    or built, belong to ``core/``, which the router calls with the session it opens."""
    found = []
    for path in sorted(ROUTERS.rglob("*.py")):
        name = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = _resolve_relative(name, path.name == "__init__.py", node.level, base)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            banned = ("sqlalchemy", f"{PACKAGE}.db")
            if any(n == b or n.startswith(b + ".") for n in names for b in banned):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not found, "routers that import SQLAlchemy or db (move it to core/):\n  " + (
        "\n  ".join(found)
    )
