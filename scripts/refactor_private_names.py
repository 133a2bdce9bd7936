"""Issue 49 item 4, the mechanical part: a re-runnable rewrite of the imports of ``src/``.

Run from the repository root: ``python scripts/refactor_private_names.py`` (``--check``
only reports what it would change and exits 1 when something would). Three passes, each
over every module of ``src/akka_optimize`` (uses are rewritten in ``src/``, ``tests/``,
``benchmarks/`` and ``examples/`` too), then ``ruff check --fix --select I`` and ``ruff
format`` on the files it changed. It is deterministic (files and names in sorted order)
and idempotent: a second run changes nothing.

1. Unused re-exports. ``from X import Y as Y`` in a module M (the explicit re-export form)
   is kept where some other file reads ``Y`` from M: ``from M import Y``, ``M.Y`` through
   a module alias, ``getattr(M, "Y")`` / ``monkeypatch.setattr(M, "Y", ...)``, a
   ``"M:Y"`` or ``"M.Y"`` string (a job kind's worker), or M's ``__all__``. Otherwise it
   becomes a plain ``from X import Y`` when M itself uses ``Y``, and is deleted when M does
   not. Repeated until nothing changes (a deleted re-export may leave another unread).
2. Private names shared between modules. Every name with one leading underscore that a
   module of ``src/`` imports from another (``from .x import _name``) or reads through a
   module alias (``x._name``) becomes public where
   it is defined (following re-exports to the defining module): ``_name`` -> ``name``, or
   the name :data:`RENAMES` gives, or ``<module>_<name>`` where the bare name is taken in
   one of the files that would bind it. Every import, use (a function's own local of the
   same name is left alone), ``module._name`` attribute and ``"module:_name"`` string is
   rewritten in ``src/`` and the test, benchmark and example files.
3. Function-level imports of the project's own modules move to the module's top, unless
   the imported module's top-level imports (followed through the project) bring in a heavy
   or optional third-party package the importing module does not load already
   (:data:`HEAVY`: torch, transformers, fastapi, sqlalchemy, ...); those stay where they
   are with a ``# lazy: <why>`` comment. Since ``tests/test_import_graph.py`` counts
   function-level imports too, a circle can only come through a package's ``__init__``
   (importing ``a.b.c`` runs ``a.b``'s first): an import that would close one stays, as do
   imports under ``try``/``if`` inside a function, ones whose name the module's top binds
   to something else, and every one of a module the moves would take past
   ``tests/test_layout.py``'s 420 lines (the script starts again without moving those),
   each with its comment. A module the renames alone take past the ceiling is printed:
   split it by hand.

``tests/test_import_graph.py`` checks the outcome: no module imports another module's
underscore names, no unused re-export, every function-level import of a project module
carries a comment.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import keyword
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "akka_optimize"
REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / PACKAGE
USER_DIRS = ("tests", "benchmarks", "examples")

RENAMES: dict[tuple[str, str], str] = {
    # (defining module, private name) -> public name, where the bare name reads badly
    ("akka_optimize.core.endpoints.records", "_limits"): "serving_limits",
    ("akka_optimize.core.endpoints.records", "_models"): "endpoint_models",
    ("akka_optimize.jobs.capacity.ledger", "_copy"): "copy_ledger",
    ("akka_optimize.jobs.training", "_version"): "spec_version",
    ("akka_optimize.core.access.tinker", "_session"): "caller_session",
    ("akka_optimize.core.access.tinker", "_int"): "body_int",
    ("akka_optimize.core.access.tinker", "_model"): "caller_model",
    ("akka_optimize.core.access.tinker", "_project"): "caller_project",
    ("akka_optimize.core.access.tinker", "_mine"): "sees_project",
    ("akka_optimize.service.routers.registry.transfer", "_spool"): "spool_body",
    ("akka_optimize.service.routers.registry.transfer", "_stream"): "stream_file",
    ("akka_optimize.service.routers.registry.transfer", "_limits"): "registry_limits",
    ("akka_optimize.service.routers.registry.transfer", "_uploads"): "uploads_dir",
    ("akka_optimize.data.row_fields", "_kind"): "value_kind",
    ("akka_optimize.evals.sandbox.records", "_result"): "grade_result",
    ("akka_optimize.evals.sandbox.records", "_fmt"): "fmt_seconds",
    ("akka_optimize.forkserver", "_exists"): "pid_exists",
    ("akka_optimize.data.sentinels", "_Field"): "SentinelField",
    ("akka_optimize.data.sentinels", "_render"): "render_messages",
    ("akka_optimize.data.masks", "_stats"): "length_stats",
    ("akka_optimize.evals.views", "_iso"): "iso_time",
    ("akka_optimize.core.pipelines.shape", "_fill"): "fill_stage",
    ("akka_optimize.core.pipelines.shape", "_shape"): "pipeline_shape",
    ("akka_optimize.service.routers.endpoints.routes", "_forward"): "forward_to_worker",
    ("akka_optimize.cli.registry.transfer", "_path"): "registry_path",
    ("akka_optimize.cli.registry.transfer", "_ref"): "parse_ref",
    ("akka_optimize.core.pipelines.stages", "_hash"): "stage_hash",
    ("akka_optimize.evals.summaries", "_records"): "summary_records",
    ("akka_optimize.evals.summaries", "_result"): "summary_result",
    ("akka_optimize.evals.kind", "_claims"): "evaluation_claims",
    ("akka_optimize.evals.kind", "_progress"): "record_progress",
    ("akka_optimize.evals.worker", "_limits"): "sandbox_limits",
    ("akka_optimize.jobs.training", "_prepare"): "prepare_rows",
    ("akka_optimize.core.openai_ft.jobs", "_rename"): "rename_field",
    ("akka_optimize.evals.graders.judges", "_conversation"): "conversation_text",
    ("akka_optimize.plan.schema.base", "_Group"): "Group",
    ("akka_optimize.engine.sft", "_finish"): "finish_run",
}
"""Public names chosen by hand; a private name not listed here loses its underscore (or
takes its module's name as a prefix where the bare name is taken)."""

HEAVY = (
    "torch",
    "transformers",
    "peft",
    "vllm",
    "ray",
    "accelerate",
    "datasets",
    "safetensors",
    "huggingface_hub",
    "tokenizers",
    "numpy",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "boto3",
    "botocore",
    "prometheus_client",
    "httpx",
    "jinja2",
    "playwright",
    "liger_kernel",
)
"""Third-party packages whose import costs (torch: seconds) or may be missing (vllm, ray):
a function-level import that would bring one into a module that does not load it stays."""


MODULE_LINES = 420
"""tests/test_layout.py's ceiling: a module this close to it takes no more top imports."""


# ---------------------------------------------------------------- files and modules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@dataclass
class File:
    """One Python file: its text (edited in memory), its module name if under ``src/``."""

    path: Path
    text: str
    module: str | None
    changed: bool = False
    _tree: ast.Module | None = field(default=None, repr=False)

    @property
    def tree(self) -> ast.Module:
        if self._tree is None:
            self._tree = ast.parse(self.text, filename=str(self.path))
        return self._tree

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text, self.changed, self._tree = text, True, None


def load_files() -> list[File]:
    files = [
        File(p, p.read_text(encoding="utf-8"), module_name(p)) for p in sorted(SRC.rglob("*.py"))
    ]
    for d in USER_DIRS:
        for p in sorted((REPO / d).rglob("*.py")):
            files.append(File(p, p.read_text(encoding="utf-8"), None))
    return files


def resolve_from(f: File, node: ast.ImportFrom) -> str | None:
    """The absolute module an ``ImportFrom`` reads from, or None (not the project's)."""
    if node.level:
        if f.module is None:
            return None
        base = f.module.split(".") if f.is_package else f.module.split(".")[:-1]
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    return mod if mod == PACKAGE or mod.startswith(PACKAGE + ".") else None


@dataclass(frozen=True)
class Edit:
    line: int  # 1-based
    col: int  # 0-based, in characters of the line
    end_line: int
    end_col: int
    text: str


def apply_edits(f: File, edits: list[Edit]) -> None:
    """Replace each span (none overlapping) with its text."""
    if not edits:
        return
    lines = f.text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col

    text = f.text
    for e in sorted(set(edits), key=lambda e: (e.line, e.col), reverse=True):
        a, b = offset(e.line, e.col), offset(e.end_line, e.end_col)
        text = text[:a] + e.text + text[b:]
    f.set_text(text)


def byte_to_char(line: str, col: int) -> int:
    """AST columns count UTF-8 bytes; edits count characters."""
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))


def span(f: File, node: ast.AST) -> tuple[int, int, int, int]:
    lines = f.text.splitlines()
    return (
        node.lineno,
        byte_to_char(lines[node.lineno - 1], node.col_offset),
        node.end_lineno,
        byte_to_char(lines[node.end_lineno - 1], node.end_col_offset),
    )


# ---------------------------------------------------------------- who reads what


class Reads:
    """Which names of which project modules each file reads, and its module aliases."""

    def __init__(self, files: list[File]) -> None:
        self.files = files
        self.modules = {f.module: f for f in files if f.module}
        self.reads: dict[tuple[str, str], set[Path]] = {}
        # where each (module, name) is read: from-imports, attributes, call strings
        self.imports: dict[tuple[str, str], list[tuple[File, ast.ImportFrom, ast.alias]]] = {}
        self.attrs: dict[tuple[str, str], list[tuple[File, ast.Attribute]]] = {}
        self.calls: dict[tuple[str, str], list[tuple[File, ast.Constant]]] = {}
        self.strings: list[tuple[File, ast.Constant]] = []
        self.aliases: dict[Path, dict[str, str]] = {}
        for f in files:
            self._scan(f)

    def is_module(self, name: str) -> bool:
        return name in self.modules

    def _add(self, mod: str, name: str, f: File) -> None:
        self.reads.setdefault((mod, name), set()).add(f.path)

    def module_aliases(self, f: File) -> dict[str, str]:
        """Local names bound to project modules anywhere in ``f`` (a scope-free view)."""
        out: dict[str, str] = {}
        for node in ast.walk(f.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                        if a.asname:
                            out[a.asname] = a.name
                        else:
                            out[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                mod = resolve_from(f, node)
                if mod is None:
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    if self.is_module(sub):
                        out[a.asname or a.name] = sub
        return out

    def dotted_module(self, node: ast.AST, aliases: dict[str, str]) -> str | None:
        """The project module an expression (``m``, ``a.b.c``) names, or None."""
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted_module(node.value, aliases)
            if base is not None and self.is_module(f"{base}.{node.attr}"):
                return f"{base}.{node.attr}"
        return None

    def _scan(self, f: File) -> None:
        aliases = self.aliases[f.path] = self.module_aliases(f)
        for node in ast.walk(f.tree):
            if isinstance(node, ast.ImportFrom):
                mod = resolve_from(f, node)
                if mod is not None:
                    for a in node.names:
                        self.imports.setdefault((mod, a.name), []).append((f, node, a))
                        if not self.is_module(f"{mod}.{a.name}"):
                            self._add(mod, a.name, f)
            elif isinstance(node, ast.Attribute):
                mod = self.dotted_module(node.value, aliases)
                if mod is not None:
                    self._add(mod, node.attr, f)
                    self.attrs.setdefault((mod, node.attr), []).append((f, node))
            elif isinstance(node, ast.Call) and len(node.args) >= 2:
                mod = self.dotted_module(node.args[0], aliases)
                arg = node.args[1]
                if mod is not None and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    self._add(mod, arg.value, f)
                    self.calls.setdefault((mod, arg.value), []).append((f, arg))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found = False
                for m in STRING_REF.finditer(node.value):
                    mod, name = m.group(1), m.group(2)
                    if not self.is_module(mod):
                        mod, _, extra = mod.rpartition(".")
                        name = extra if self.is_module(mod) else name
                    if self.is_module(mod):
                        self._add(mod, name, f)
                        found = True
                if found:
                    self.strings.append((f, node))

    def readers(self, mod: str, name: str) -> set[Path]:
        return self.reads.get((mod, name), set())


STRING_REF = re.compile(r"\b(akka_optimize(?:\.\w+)+)[:.](\w+)\b")


# ---------------------------------------------------------------- 1. unused re-exports


def dunder_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                try:
                    return set(ast.literal_eval(node.value))
                except ValueError:
                    return set()
    return set()


def used_locally(f: File, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Store)
        for n in ast.walk(f.tree)
    )


def alias_edit(f: File, alias: ast.alias, replacement: str | None) -> Edit:
    """An edit that replaces ``alias`` by ``replacement``, or removes it from its statement
    (its whole line, comment included, where it stands alone on it)."""
    lines = f.text.splitlines(keepends=True)
    a_line, a_col, _, a_end = span(f, alias)
    if replacement is not None:
        return Edit(a_line, a_col, a_line, a_end, replacement)
    line = lines[a_line - 1]
    rest = line[a_end:]
    if line[:a_col].strip() == "" and re.fullmatch(r"\s*,?\s*(#.*)?\n?", rest):
        return Edit(a_line, 0, a_line + 1, 0, "")
    m = re.match(r"\s*,\s*", rest)
    if m:
        return Edit(a_line, a_col, a_line, a_end + m.end(), "")
    m = re.search(r",\s*$", line[:a_col])
    return Edit(a_line, m.start() if m else a_col, a_line, a_end, "")


def drop_unused_reexports(files: list[File], log: list[str]) -> None:
    while True:
        reads = Reads(files)
        edits: dict[Path, list[Edit]] = {}
        for f in files:
            if f.module is None:
                continue
            exported = dunder_all(f.tree)
            for node in f.tree.body:
                if not isinstance(node, ast.ImportFrom):
                    continue
                src_mod = resolve_from(f, node)
                plain, gone = [], []
                for a in node.names:
                    if a.asname != a.name or a.name == "*":
                        continue
                    if src_mod is not None and reads.is_module(f"{src_mod}.{a.name}"):
                        continue  # a submodule bound on its package
                    if a.name in exported or reads.readers(f.module, a.name) - {f.path}:
                        continue
                    (plain if used_locally(f, a.name) else gone).append(a)
                for a in plain:
                    log.append(f"re-export {f.module}.{a.name}: read only there, plain import")
                for a in gone:
                    log.append(f"re-export {f.module}.{a.name}: read nowhere, deleted")
                mine = edits.setdefault(f.path, [])
                if gone and len(gone) == len(node.names):
                    mine.append(Edit(node.lineno, 0, node.end_lineno + 1, 0, ""))
                    continue
                mine.extend(alias_edit(f, a, a.name) for a in plain)
                mine.extend(alias_edit(f, a, None) for a in gone)
        if not any(edits.values()):
            return
        for f in files:
            apply_edits(f, edits.get(f.path, []))


# ---------------------------------------------------------------- 2. private names


def definer(reads: Reads, mod: str, name: str, seen: set[str] | None = None) -> str:
    """The module that defines ``name`` that ``mod`` exposes (following re-imports)."""
    seen = seen or set()
    f = reads.modules.get(mod)
    if f is None or mod in seen:
        return mod
    seen.add(mod)
    for node in f.tree.body:
        if isinstance(node, ast.ImportFrom):
            src = resolve_from(f, node)
            for a in node.names:
                if (a.asname or a.name) == name and src is not None:
                    return definer(reads, src, a.name, seen)
    return mod


def identifiers(f: File) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(f.tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


def local_bindings(fn: ast.AST, ours: frozenset[int] = frozenset()) -> set[str]:
    """Names a function binds itself (its arguments, assignments, imports, loops); the
    import aliases whose ids are in ``ours`` (the imports being renamed) do not count."""
    out: set[str] = set()
    declared: set[str] = set()
    args = getattr(fn, "args", None)
    if args is not None:
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            out.add(a.arg)
        if args.vararg:
            out.add(args.vararg.arg)
        if args.kwarg:
            out.add(args.kwarg.arg)
    for n in walk_scope(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            declared.update(n.names)
        elif isinstance(n, ast.alias) and id(n) not in ours:
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n is not fn:
            out.add(n.name)
    return out - declared


def walk_scope(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own scope (nested functions' bodies excluded)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        todo.extend(ast.iter_child_nodes(n))


def rename_uses(f: File, old: str, new: str, ours: frozenset[int], defines: bool) -> list[Edit]:
    """Edits renaming ``old`` to ``new`` wherever ``f`` reads or binds it: everywhere in the
    module that ``defines`` it or imports it at its top (a function that binds ``old``
    itself keeps its own), and inside the functions that import it (``ours``: the ids of
    the import aliases being renamed) in a module that has an ``old`` of its own."""
    edits: list[Edit] = []
    lines = f.text.splitlines()

    def visit(node: ast.AST, shadowed: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inner = shadowed or old in local_bindings(node, ours)
            if any(isinstance(n, ast.alias) and id(n) in ours for n in walk_scope(node)):
                inner = False
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for d in node.decorator_list:
                    visit(d, shadowed)
                if node.name == old and not shadowed:
                    edits.append(def_name_edit(lines, node, old, new))
                for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
                    visit(default, shadowed)
                for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    if a.annotation is not None:
                        visit(a.annotation, shadowed)
                if node.returns is not None:
                    visit(node.returns, shadowed)
                for child in node.body:
                    visit(child, inner)
            else:
                visit(node.body, inner)
            return
        if isinstance(node, ast.ClassDef):
            if node.name == old and not shadowed:
                edits.append(def_name_edit(lines, node, old, new))
            own = any(  # a class attribute of the same name is the class's own
                isinstance(n, ast.Name) and n.id == old and isinstance(n.ctx, ast.Store)
                for s in node.body
                if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                for n in ast.walk(s)
            )
            for d in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                visit(d, shadowed)
            for s in node.body:
                fn_like = isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                visit(s, shadowed if fn_like else shadowed or own)
            return
        if isinstance(node, ast.Name) and node.id == old and not shadowed:
            line, col, end_line, end_col = span(f, node)
            edits.append(Edit(line, col, end_line, end_col, new))
        if isinstance(node, ast.Global) and old in node.names:
            text = lines[node.lineno - 1]
            m = re.search(rf"\b{re.escape(old)}\b", text[byte_to_char(text, node.col_offset) :])
            if m:
                c = byte_to_char(text, node.col_offset) + m.start()
                edits.append(Edit(node.lineno, c, node.lineno, c + len(old), new))
        for child in ast.iter_child_nodes(node):
            visit(child, shadowed)

    top = any(
        isinstance(n, ast.alias) and id(n) in ours
        for s in f.tree.body
        if isinstance(s, ast.ImportFrom)
        for n in s.names
    )
    visit(f.tree, not (defines or top))
    return edits


def def_name_edit(lines: list[str], node: ast.AST, old: str, new: str) -> Edit:
    text = lines[node.lineno - 1]
    m = re.search(rf"\b(?:def|class)\s+({re.escape(old)})\b", text)
    assert m, (node.lineno, text)
    return Edit(node.lineno, m.start(1), node.lineno, m.end(1), new)


def private_imports(files: list[File]) -> list[tuple[File, ast.ImportFrom, ast.alias, str]]:
    out = []
    for f in files:
        if f.module is None:
            continue
        for node in ast.walk(f.tree):
            if isinstance(node, ast.ImportFrom):
                mod = resolve_from(f, node)
                if mod is None:
                    continue
                for a in node.names:
                    private = a.name.startswith("_") and not a.name.startswith("__")
                    if private and f"{mod}.{a.name}" not in {g.module for g in files}:
                        out.append((f, node, a, mod))
    return out


def expose(reads: Reads, mods: set[str], old: str) -> set[str]:
    """``mods`` and every module that binds ``old`` at its top by importing it, under the
    same name, from one of them (a test may import it from any of those)."""
    out = set(mods)
    while True:
        more = {
            f.module
            for m in sorted(out)
            for f, node, a in reads.imports.get((m, old), [])
            if f.module and a.asname in (None, old) and node in f.tree.body
        } - out
        if not more:
            return out
        out |= more


def publish_private_names(files: list[File], log: list[str]) -> None:
    reads = Reads(files)
    targets: dict[tuple[str, str], set[str]] = {}  # (definer, old) -> modules it is read from
    for _f, _node, a, mod in private_imports(files):
        d = definer(reads, mod, a.name)
        targets.setdefault((d, a.name), set()).add(mod)
    for (mod, name), seen in sorted(reads.attrs.items()):  # module._name from elsewhere
        private = name.startswith("_") and not name.startswith("__")
        if private and any(f.module not in (None, mod) for f, _ in seen):
            if not reads.is_module(f"{mod}.{name}"):
                targets.setdefault((definer(reads, mod, name), name), set()).add(mod)
    if not targets:
        return
    by_path = {f.path: f for f in files}
    idents = {f.path: identifiers(f) for f in files}
    edits: dict[Path, list[Edit]] = {}
    taken_new: dict[Path, set[str]] = {}
    for (d, old), via in sorted(targets.items()):
        bare = old.lstrip("_")
        # every file that binds the name: the definer, the modules it passes through, and
        # every file that imports it plainly from one of those
        exposers = expose(reads, {d} | via, old)
        binders = {reads.modules[m].path for m in exposers if m in reads.modules}
        users = [u for m in sorted(exposers) for u in reads.imports.get((m, old), [])]
        for f, _node, a in users:
            if a.asname is None or a.asname == old:
                binders.add(f.path)
        chosen = RENAMES.get((d, old))
        candidates = [bare, f"{d.rsplit('.', 1)[-1]}_{bare}"]
        candidates = [chosen, *candidates] if chosen else candidates
        new = next(
            (
                c
                for c in candidates
                if c.isidentifier()
                and not keyword.iskeyword(c)
                and c not in dir(builtins)
                and not any(c in idents[p] or c in taken_new.get(p, set()) for p in binders)
            ),
            None,
        )
        if new is None:
            log.append(f"private {d}.{old}: no free public name, left")
            continue
        for p in binders:
            taken_new.setdefault(p, set()).add(new)
        log.append(f"private {d}.{old} -> {new}")
        ours = frozenset(id(a) for _f, _n, a in users)
        for p in sorted(binders):
            defines = by_path[p].module == d
            edits.setdefault(p, []).extend(rename_uses(by_path[p], old, new, ours, defines))
        for f, _node, a in users:
            line, col, _, end = span(f, a)
            if a.asname is None:
                edits.setdefault(f.path, []).append(Edit(line, col, line, end, new))
            elif a.asname == old:
                edits.setdefault(f.path, []).append(Edit(line, col, line, end, f"{new} as {new}"))
            else:
                edits.setdefault(f.path, []).append(
                    Edit(line, col, line, end, f"{new} as {a.asname}")
                )
        # module._old attributes, getattr/setattr strings and "module:_old" strings
        mods = exposers
        for m in sorted(mods):
            for f, node in reads.attrs.get((m, old), []):
                lines = f.text.splitlines()
                el = node.end_lineno
                ec = byte_to_char(lines[el - 1], node.end_col_offset)
                edits.setdefault(f.path, []).append(Edit(el, ec - len(old), el, ec, new))
            for f, arg in reads.calls.get((m, old), []):
                line, col, end_line, end_col = span(f, arg)
                q = f.text.splitlines()[line - 1][col]
                edits.setdefault(f.path, []).append(
                    Edit(line, col, end_line, end_col, f"{q}{new}{q}")
                )
        for f, node in reads.strings:
            if node.lineno != node.end_lineno:
                continue
            line, col, _, end_col = span(f, node)
            src = f.text.splitlines()[line - 1][col:end_col]
            for m in sorted(mods):
                for hit in re.finditer(rf"{re.escape(m)}[:.]{re.escape(old)}\b", src):
                    at = col + hit.start() + len(m) + 1
                    edits.setdefault(f.path, []).append(Edit(line, at, line, at + len(old), new))
    for f in files:
        apply_edits(f, edits.get(f.path, []))


# ---------------------------------------------------------------- 3. function-level imports


def third_party_roots(f: File) -> set[str]:
    """Top-level third-party packages ``f`` imports at module level."""
    out: set[str] = set()
    for node in f.tree.body:
        for n in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(n, ast.Import):
                out.update(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                out.add(n.module.split(".")[0])
    return {r for r in out if r != PACKAGE}


def top_imports(f: File, reads: Reads) -> set[str]:
    """Project modules ``f`` imports at module level (``if TYPE_CHECKING:`` left out)."""
    out: set[str] = set()
    for node in f.tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            out.update(project_targets(f, n, reads))
    return out


def ancestors(module: str) -> set[str]:
    """The packages above ``module``, the root package left out (it imports nothing)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(2, len(parts))}


def circle(module: str, targets: set[str], reads: Reads) -> str | None:
    """The first module through which importing ``targets`` at the top of ``module`` would
    come back to it (or to a package above it, still initialising), else None. Importing a
    module runs its packages' ``__init__`` first, which ``tests/test_import_graph.py``
    does not count; a module's own packages are initialising already and do not count."""
    mine = ancestors(module)
    forbidden = {module} | mine
    todo = sorted(targets - mine - {module})
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        f = reads.modules.get(m)
        if f is None:
            continue
        for t in top_imports(f, reads) - ancestors(m) - {m}:
            if t in forbidden:
                return m
            todo.append(t)
    return None


def project_targets(f: File, n: ast.AST, reads: Reads) -> set[str]:
    out: set[str] = set()
    if isinstance(n, ast.Import):
        for a in n.names:
            if a.name.startswith(PACKAGE + "."):
                parts = a.name.split(".")
                out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    elif isinstance(n, ast.ImportFrom):
        mod = resolve_from(f, n)
        if mod is not None:
            parts = mod.split(".")
            out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
            for a in n.names:
                if reads.is_module(f"{mod}.{a.name}"):
                    out.add(f"{mod}.{a.name}")
                else:
                    out |= lazy_attribute_targets(reads, mod, a.name)
    return {m for m in out if reads.is_module(m)}


def lazy_attribute_targets(reads: Reads, mod: str, name: str) -> set[str]:
    """What ``from mod import name`` imports through ``mod``'s module ``__getattr__`` (a
    package that loads its heavy parts on first use: ``service.create_app``)."""
    f = reads.modules.get(mod)
    if f is None or name in module_top_bindings(f):
        return set()
    out: set[str] = set()
    for node in f.tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for n in ast.walk(node):
                if isinstance(n, ast.Import | ast.ImportFrom):
                    out |= project_targets(f, n, reads)
    return out


def heavy_closure(start: set[str], reads: Reads, cache: dict[str, set[str]]) -> set[str]:
    """Third-party packages of :data:`HEAVY` the project modules ``start`` load at import."""
    seen: set[str] = set()
    todo = list(start)
    heavy: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen or m not in reads.modules:
            continue
        seen.add(m)
        f = reads.modules[m]
        if m not in cache:
            cache[m] = {r for r in third_party_roots(f) if r in HEAVY}
        heavy |= cache[m]
        todo.extend(top_imports(f, reads))
    return heavy


def function_imports(f: File, reads: Reads) -> list[tuple[ast.AST, ast.stmt]]:
    """``(function, import statement)`` for each import of a project module in a
    function's own scope, in the order of the file."""
    out = []
    for fn in ast.walk(f.tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for n in walk_scope(fn):
                if isinstance(n, ast.Import | ast.ImportFrom) and project_targets(f, n, reads):
                    out.append((fn, n))
    return sorted(out, key=lambda t: t[1].lineno)


def parent_map(tree: ast.AST) -> dict[int, ast.AST]:
    out: dict[int, ast.AST] = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            out[id(c)] = p
    return out


def module_top_bindings(f: File) -> dict[str, str]:
    """Names the module's top binds, with what: ``import <source>`` text or ``other``."""
    out: dict[str, str] = {}
    for node in f.tree.body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = f"{'.' * node.level}{node.module or ''}:{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = f"import:{a.name}:{a.asname}"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = "other"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = "other"
    return out


def absolute_text(f: File, n: ast.stmt) -> str:
    """The import statement as written, on one line (relative levels kept)."""
    if isinstance(n, ast.ImportFrom):
        names = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in n.names)
        return f"from {'.' * n.level}{n.module or ''} import {names}"
    names = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in n.names)
    return f"import {names}"


def has_comment(f: File, n: ast.stmt) -> bool:
    lines = f.text.splitlines()
    own = lines[n.lineno - 1 : n.end_lineno]
    above = lines[n.lineno - 2].strip() if n.lineno >= 2 else ""
    return any("#" in ln for ln in own) or above.startswith("#")


def insertion_line(f: File) -> int:
    """The line (1-based) after the module's last top-level import statement."""
    last = 0
    for node in f.tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            last = node.end_lineno
        elif isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            last = max(last, node.end_lineno) if last == 0 else last
        elif last:
            break
    return last


def lazy_comment(f: File, n: ast.stmt, reason: str) -> Edit:
    """``# lazy: reason`` after the statement, or on a line of its own above it where the
    statement's line would pass 100 characters (ruff format would wrap it in parentheses)."""
    lines = f.text.splitlines()
    end = lines[n.end_lineno - 1]
    comment = f"# lazy: {reason}"
    if len(end) + 2 + len(comment) <= 100:
        return Edit(n.end_lineno, len(end), n.end_lineno, len(end), f"  {comment}")
    indent = re.match(r"\s*", lines[n.lineno - 1]).group(0)
    return Edit(n.lineno, 0, n.lineno, 0, f"{indent}{comment}\n")


def binding_of(n: ast.Import | ast.ImportFrom, a: ast.alias) -> str:
    if isinstance(n, ast.ImportFrom):
        return f"{'.' * n.level}{n.module or ''}:{a.name}"
    return f"import:{a.name}:{a.asname}"


def why_lazy(
    f: File, fn: ast.AST, n: ast.stmt, parent: ast.AST, reads: Reads, cache, full: set[str]
) -> str | None:
    """Why the function-level import ``n`` must stay where it is, or None."""
    if parent is not fn:
        return "guarded"
    mine = heavy_closure({f.module}, reads, cache) | {r for r in third_party_roots(f) if r in HEAVY}
    brings = heavy_closure(project_targets(f, n, reads), reads, cache) - mine
    if brings:
        return next(h for h in HEAVY if h in brings)  # the costliest it would load
    through = circle(f.module, project_targets(f, n, reads), reads)
    if through is not None:
        return f"circle via {through.rsplit('.', 1)[-1]}"
    if f.module in full:
        return "line ceiling"
    top = module_top_bindings(f)
    for a in n.names:
        bound = a.asname or a.name.split(".")[0]
        if top.get(bound, binding_of(n, a)) != binding_of(n, a):
            return f"{bound} taken"
    return None


def hoist_function_imports(files: list[File], log: list[str], full: set[str]) -> None:
    reads = Reads(files)  # module names do not change here; each File re-parses its text
    cache: dict[str, set[str]] = {}
    for f in files:
        if f.module is None:
            continue
        while True:
            parents = parent_map(f.tree)
            comments: list[Edit] = []
            lazy: list[str] = []
            hoisted = False
            for fn, n in function_imports(f, reads):
                if has_comment(f, n):
                    continue
                reason = why_lazy(f, fn, n, parents[id(n)], reads, cache, full)
                if reason is not None:
                    comments.append(lazy_comment(f, n, reason))
                    lazy.append(f"lazy {f.module}:{n.lineno} {absolute_text(f, n)} ({reason})")
                    continue
                text = absolute_text(f, n)
                if all(s is n or is_docstring(s) for s in fn.body):
                    indent = re.match(r"\s*", f.text.splitlines()[n.lineno - 1]).group(0)
                    edits = [Edit(n.lineno, 0, n.end_lineno + 1, 0, f"{indent}pass\n")]
                else:
                    edits = [Edit(n.lineno, 0, n.end_lineno + 1, 0, "")]
                top = module_top_bindings(f)
                if not all((a.asname or a.name.split(".")[0]) in top for a in n.names):
                    at = insertion_line(f)
                    edits.append(Edit(at + 1, 0, at + 1, 0, text + "\n"))
                apply_edits(f, edits)
                log.append(f"hoisted {f.module}: {text}")
                hoisted = True
                break  # the file changed: parse it again
            if not hoisted:
                apply_edits(f, comments)
                log.extend(lazy)
                break


def imported_names(fn: ast.AST) -> set[str]:
    return {
        (a.asname or a.name).split(".")[0]
        for n in walk_scope(fn)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }


def is_docstring(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


# ---------------------------------------------------------------- main


def rewrite(full: set[str], skip_hoist: bool) -> tuple[list[File], list[str]]:
    """The three passes over the files as they are on disk, in memory."""
    files = load_files()
    log: list[str] = []
    drop_unused_reexports(files, log)
    publish_private_names(files, log)
    drop_unused_reexports(files, log)
    if not skip_hoist:
        hoist_function_imports(files, log, full)
    return [f for f in files if f.changed], log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="report only; exit 1 if anything would change"
    )
    ap.add_argument("--skip-hoist", action="store_true", help="passes 1 and 2 only")
    args = ap.parse_args(argv)
    full: set[str] = set()  # modules the moved imports would take past the line ceiling
    while True:
        changed, log = rewrite(full, args.skip_hoist)
        if args.check or not changed:
            break
        originals = {f.path: f.path.read_text(encoding="utf-8") for f in changed}
        for f in changed:
            f.path.write_text(f.text, encoding="utf-8")
        paths = [str(f.path) for f in changed]
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run([*ruff, "check", "--fix", "--select", "I", "--quiet", *paths], check=False)
        subprocess.run([*ruff, "format", "--quiet", *paths], check=True)
        over = {
            f.module
            for f in changed
            if f.module
            and f.module not in full
            and len(f.path.read_text(encoding="utf-8").splitlines()) > MODULE_LINES
        }
        if not over or args.skip_hoist:
            break
        for path, text in originals.items():  # again from the start, those modules kept
            path.write_text(text, encoding="utf-8")
        full |= over
    for line in log:
        print(line)
    print(f"{len(changed)} files would change" if args.check else f"{len(changed)} files changed")
    for f in changed:
        if not args.check and len(f.path.read_text(encoding="utf-8").splitlines()) > MODULE_LINES:
            print(f"over {MODULE_LINES} lines after the renames, split by hand: {f.path}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
