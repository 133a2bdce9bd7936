"""Grader specifications: what grades an answer, and the submit-time check of a bundle's entry.

The grammar (seed "Grader specification"):

- ``bundle:REFERENCE#MODULE`` or ``bundle:REFERENCE#MODULE:FUNCTION``: a function in a
  scoring bundle of the registry. ``REFERENCE`` is a registry reference
  (:mod:`akka_optimize.refs`: ``NS/NAME``, ``NAME``, ``:vN``, ``:ALIAS``, ``@sha256:…``);
  ``MODULE`` is a dotted Python module path inside the bundle (``reward``, ``pkg.reward``);
  ``FUNCTION`` defaults to ``compute_score``, veRL's reward-function name
  (``verl/utils/reward_score``). Example: ``bundle:gsm8k/scoring#reward:compute_score``.
- ``model:REFERENCE``: a judge model of the registry.

The 0.7 spelling ``bundle:BUNDLE/MODULE:FUNCTION`` is refused with its 0.8 form: a
reference holds ``/`` and ``:`` itself, so the module now follows a ``#``.

:func:`check_bundle_entry` reads the bundle's sources with :mod:`ast` only: it runs inside
the service, so the user's code is never imported or executed there (that happens in the
sandbox, :mod:`akka_optimize.evals.sandbox.pool`).
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ...errors import InvalidRequest, excerpt
from ...refs import parse_ref

DEFAULT_FUNCTION = "compute_score"
"""The function a bundle grader calls when the spec names none (veRL's convention)."""

FORMS = (
    "bundle:REFERENCE#MODULE[:FUNCTION] (for example bundle:gsm8k/scoring#reward:compute_score) "
    "or model:REFERENCE (a judge model)"
)
"""The two accepted forms, as refusals list them."""

LISTED_NAMES = 10
"""The most file or function names a refusal lists."""

_PLACEHOLDER_PROJECT = "project"
"""A project name used only to validate a bare ``NAME`` reference; the reference is kept as
given and resolved later in the request's project."""

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OLD_FORM_RE = re.compile(r"([^/:#@]+)/([A-Za-z_][A-Za-z0-9_.]*):([A-Za-z_][A-Za-z0-9_]*)")
_VERSION_TAG_RE = re.compile(r"v[0-9]+|latest", re.IGNORECASE)


@dataclass(frozen=True)
class GraderSpec:
    """A parsed grader specification.

    Attributes:
        kind: ``bundle`` (a function in a scoring bundle) or ``model`` (a judge model).
        ref: the registry reference as given (``gsm8k/scoring:v2``, ``scoring``, ``judge``);
            resolve it in the request's project.
        module: the dotted module inside the bundle (``reward``, ``pkg.reward``); None for
            a model.
        function: the function inside the module (``compute_score`` unless named); None
            for a model.
    """

    kind: str
    ref: str
    module: str | None = None
    function: str | None = None

    @property
    def text(self) -> str:
        """The canonical spelling: ``bundle:REF#MODULE:FUNCTION`` or ``model:REF``."""
        if self.kind == "model":
            return f"model:{self.ref}"
        return f"bundle:{self.ref}#{self.module}:{self.function or DEFAULT_FUNCTION}"


def _unknown(text: str, field: str) -> InvalidRequest:
    if not text.strip():
        return InvalidRequest(f"The grader is empty: use {FORMS}.", field=field)
    return InvalidRequest(f"Grader {excerpt(text)} is not a grader: use {FORMS}.", field=field)


def _check_reference(ref: str, field: str) -> None:
    # Validates the reference part only; a bare NAME lies in the request's project, which
    # is not known here, so a placeholder project stands in for it.
    parse_ref(ref, _PLACEHOLDER_PROJECT, field=field)


def _not_identifier(what: str, name: str, text: str, field: str) -> InvalidRequest:
    return InvalidRequest(
        f"Grader {excerpt(text)}: the {what} {excerpt(name)} is not a Python identifier "
        "(ASCII letters, digits and '_', not starting with a digit, not a keyword); "
        f"write bundle:REFERENCE#MODULE[:FUNCTION], the module dotted like pkg.reward.",
        field=field,
    )


def _is_identifier(name: str) -> bool:
    return bool(_IDENT_RE.fullmatch(name)) and not keyword.iskeyword(name)


def parse_grader(text: str, field: str = "grader") -> GraderSpec:
    """Parse a grader specification (grammar in the module docstring).

    Args:
        text: the specification as written (surrounding spaces are ignored; the prefix is
            not case sensitive, nor is the reference).
        field: the request field named in refusals (``grader``, ``config.rlHyperparams.reward``).

    Returns:
        A :class:`GraderSpec`; a bundle's ``function`` is ``compute_score`` when not named.

    Raises:
        InvalidRequest: (``field=field``) an empty or unknown prefix (the sentence lists the
            two forms), the 0.7 spelling ``bundle:BUNDLE/MODULE:FUNCTION`` (the sentence
            gives the 0.8 spelling built from it), a bundle spec without a module, a module
            or function that is not a Python identifier, or a malformed reference (the
            refusal of :func:`akka_optimize.refs.parse_ref`).
    """
    if not isinstance(text, str):
        raise InvalidRequest(
            f"Grader must be a string, not {type(text).__name__}: use {FORMS}.", field=field
        )
    stripped = text.strip()
    prefix, colon, rest = stripped.partition(":")
    kind = prefix.lower()
    if not colon or kind not in ("bundle", "model"):
        raise _unknown(text, field)
    rest = rest.strip()
    if kind == "model":
        _check_reference(rest, field)
        return GraderSpec(kind="model", ref=rest)

    ref, hash_, entry = rest.partition("#")
    ref = ref.strip()
    if not hash_:
        old = _OLD_FORM_RE.fullmatch(rest)
        if old and not _VERSION_TAG_RE.fullmatch(old.group(3)):
            bundle, module, function = old.groups()
            raise InvalidRequest(
                f"Grader {excerpt(text)} uses the 0.7 spelling bundle:BUNDLE/MODULE:FUNCTION. "
                "Since 0.8 the bundle is a registry reference and the module follows a '#': "
                f"write bundle:{bundle}#{module}:{function} (or bundle:NS/{bundle}#{module}:"
                f"{function} to name the bundle's namespace). If {rest!r} is the bundle's "
                f"reference, add its module: bundle:{rest}#reward.",
                field=field,
            )
        raise InvalidRequest(
            f"Grader {excerpt(text)} names no module: write bundle:{rest or 'REFERENCE'}#MODULE "
            f"or bundle:{rest or 'REFERENCE'}#MODULE:FUNCTION, for example "
            f"bundle:{rest or 'gsm8k/scoring'}#reward:compute_score.",
            field=field,
        )
    module, sep, function = entry.strip().partition(":")
    if not module:
        raise InvalidRequest(
            f"Grader {excerpt(text)} names no module after '#': write "
            f"bundle:{ref or 'REFERENCE'}#MODULE[:FUNCTION], for example "
            f"bundle:{ref or 'gsm8k/scoring'}#reward:compute_score.",
            field=field,
        )
    if not all(_is_identifier(part) for part in module.split(".")):
        raise _not_identifier("module", module, text, field)
    if sep and not function:
        raise InvalidRequest(
            f"Grader {excerpt(text)}: nothing follows ':' after the module; name the function "
            f"(bundle:{ref}#{module}:compute_score) or leave ':' out for compute_score.",
            field=field,
        )
    function = function or DEFAULT_FUNCTION
    if not _is_identifier(function):
        raise _not_identifier("function", function, text, field)
    _check_reference(ref, field)
    return GraderSpec(kind="bundle", ref=ref, module=module, function=function)


# --- the submit-time check ------------------------------------------------------------------


def _listing(names: list[str]) -> str:
    names = sorted(names)
    if not names:
        return "it holds no files"
    shown = ", ".join(names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return f"it holds: {shown}" + (f" and {more} more" if more > 0 else "")


def _entries_under(files: Mapping[str, bytes], folder: str) -> list[str]:
    """The Python files and folders directly under ``folder`` ("" for the root), as paths."""
    prefix = f"{folder}/" if folder else ""
    out: set[str] = set()
    for path in files:
        if not path.startswith(prefix):
            continue
        head, slash, _ = path[len(prefix) :].partition("/")
        if slash:
            out.add(f"{prefix}{head}/")
        elif head.endswith(".py"):
            out.add(f"{prefix}{head}")
    return sorted(out)


def _parse(files: Mapping[str, bytes], path: str, bundle: str, field: str) -> ast.Module:
    try:
        return ast.parse(files[path], filename=path)
    except SyntaxError as exc:
        line = exc.lineno or 1
        raise InvalidRequest(
            f"Bundle {bundle}: {path} does not parse at line {line}: {exc.msg}. Fix the file "
            "and register a new version of the bundle.",
            field=field,
            details={"file": path, "line": line},
        ) from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InvalidRequest(
            f"Bundle {bundle}: {path} does not parse at line 1: {exc}. Fix the file and "
            "register a new version of the bundle.",
            field=field,
            details={"file": path, "line": 1},
        ) from exc


def _bindings(body: list[ast.stmt]) -> Iterator[tuple[str, ast.AST]]:
    """(name, node) for every name bound at a module's top level, including inside
    top-level ``if``/``try``/``with``/loop blocks (still module scope), not inside
    functions or classes. A star import yields ``("*", node)``."""

    def targets(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Tuple | ast.List):
            for elt in node.elts:
                yield from targets(elt)
        elif isinstance(node, ast.Starred):
            yield from targets(node.value)

    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield stmt.name, stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for name in targets(target):
                    yield name, stmt
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
            for name in targets(stmt.target):
                yield name, stmt
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                yield (alias.asname or alias.name.split(".")[0]), stmt
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                yield (alias.asname or alias.name), stmt
        elif isinstance(stmt, ast.For | ast.AsyncFor | ast.While | ast.If):
            if isinstance(stmt, ast.For | ast.AsyncFor):
                for name in targets(stmt.target):
                    yield name, stmt
            yield from _bindings(stmt.body)
            yield from _bindings(stmt.orelse)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                if item.optional_vars is not None:
                    for name in targets(item.optional_vars):
                        yield name, stmt
            yield from _bindings(stmt.body)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            yield from _bindings(stmt.body)
            for handler in stmt.handlers:
                yield from _bindings(handler.body)
            yield from _bindings(stmt.orelse)
            yield from _bindings(stmt.finalbody)


def _resolve_module(
    files: Mapping[str, bytes], module: str, bundle: str, field: str
) -> tuple[str, list[str]]:
    """The file a dotted module imports from, and the parent packages' ``__init__.py``
    files that run first. Python's own order: a package ``a/b/__init__.py`` wins over a
    module ``a/b.py``."""
    parts = module.split(".")
    inits: list[str] = []
    for i in range(len(parts) - 1):
        folder = "/".join(parts[: i + 1])
        if not any(p.startswith(folder + "/") for p in files):
            raise InvalidRequest(
                f"Bundle {bundle} has no package {'.'.join(parts[: i + 1])} (no folder "
                f"{folder}/, needed for module {module}); "
                f"{_listing(_entries_under(files, '/'.join(parts[:i])))}.",
                field=field,
            )
        if f"{folder}/__init__.py" in files:
            inits.append(f"{folder}/__init__.py")
    base = "/".join(parts)
    for candidate in (f"{base}/__init__.py", f"{base}.py"):
        if candidate in files:
            return candidate, inits
    raise InvalidRequest(
        f"Bundle {bundle} has no module {module} (no {base}.py or {base}/__init__.py; "
        f"{_listing(_entries_under(files, '/'.join(parts[:-1])))}).",
        field=field,
    )


def check_bundle_entry(
    files: Mapping[str, bytes], spec: GraderSpec, bundle: str, field: str = "grader"
) -> None:
    """Check, without running anything, that a bundle defines the grader's entry point.

    The module must resolve to ``MODULE/as/path.py`` or ``MODULE/as/path/__init__.py``
    (a package wins, as in Python), it and its parent packages' ``__init__.py`` must parse,
    and ``FUNCTION`` must be bound at the module's top level: a ``def``, an assignment
    (``compute_score = _impl``) or an import (``from .impl import compute_score``) count,
    also inside a top-level ``if``/``try``; an ``async def`` is refused, since graders are
    called synchronously (veRL's reward-function convention, ``verl/utils/reward_score``).
    A star import is accepted (what it binds is only known when it runs; the sandbox then
    says so per example).

    Args:
        files: the bundle's files, relative POSIX path → bytes (its Python files suffice).
        spec: a bundle grader (:func:`parse_grader`).
        bundle: the pinned bundle version for sentences, e.g. ``gsm8k/scoring:v1``.
        field: the request field named in refusals.

    Raises:
        InvalidRequest: (``field=field``) the spec is not a bundle grader; the bundle has
            no such package or module (the sentence lists up to :data:`LISTED_NAMES` of
            what it holds there); a file does not parse (file and line named, also in
            ``details``); the function is missing (the sentence lists what the module
            defines) or is ``async def``.
    """
    if spec.kind != "bundle" or not spec.module:
        raise InvalidRequest(
            f"Grader {spec.text} is a judge model; it has no bundle module to check.",
            field=field,
        )
    files = {p.removeprefix("./"): b for p, b in files.items()}
    function = spec.function or DEFAULT_FUNCTION
    path, inits = _resolve_module(files, spec.module, bundle, field)
    for init in inits:
        _parse(files, init, bundle, field)
    tree = _parse(files, path, bundle, field)
    bound = list(_bindings(tree.body))
    found = [node for name, node in bound if name == function]
    sync = [n for n in found if not isinstance(n, ast.AsyncFunctionDef)]
    if sync:
        return
    if found:
        line = getattr(found[0], "lineno", 1)
        raise InvalidRequest(
            f"Bundle {bundle}: {path} line {line} defines {function} with async def; "
            f"graders are called synchronously, so define it with def.",
            field=field,
            details={"file": path, "line": line},
        )
    if any(name == "*" for name, _ in bound):
        return
    defined = sorted(
        {
            name
            for name, node in bound
            if isinstance(node, ast.FunctionDef) and not name.startswith("_")
        }
    )
    if defined:
        shown = ", ".join(defined[:LISTED_NAMES])
        more = len(defined) - LISTED_NAMES
        what = f"it defines: {shown}" + (f" and {more} more" if more > 0 else "")
    else:
        what = "it defines no function"
    raise InvalidRequest(
        f"Bundle {bundle}: module {spec.module} ({path}) defines no {function} at its top "
        f"level ({what}). Name the function with bundle:REFERENCE#{spec.module}:FUNCTION, "
        f"or define {function}(data_source, solution_str, ground_truth, extra_info=None).",
        field=field,
    )
