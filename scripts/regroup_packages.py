"""Regroup the package by concept (issue 49 items 1 and 5): a declarative table of module
moves, applied with ``git mv``, and every reference to a moved module rewritten.

Run from anywhere: ``python scripts/regroup_packages.py`` (``--dry-run`` lists what it
would do and writes nothing). It is re-runnable: a move already done is skipped, a move
whose source no longer exists is reported and skipped, and references written against the
old layout by anyone since (other branches merged in) are rewritten on the next run.

What it does, in order:

1. decides each move of :data:`MOVES` (pending, done, missing, blocked) and each
   compatibility stub of :data:`STUBS` (a module that only re-exports names defined
   elsewhere);
2. rewrites, by parsing each Python file with :mod:`ast` (never by line numbers), every
   ``from a.b import c`` / ``from .x import y`` that reaches a moved module or a stub (a
   relative import of a moved module, and every relative import inside a moved file,
   becomes absolute), then every dotted name ``akka_optimize.a.b`` in the text (``import``
   statements, worker entry points ``"akka_optimize.x:f"``, ``mock.patch`` and
   ``monkeypatch`` targets, docstrings) and every path ``a/b.py`` in the text files;
3. ``git mv`` each pending move, writes a docstring ``__init__.py`` for each new package
   (:data:`PACKAGE_DOCS`), ``git rm`` each stub;
4. applies :data:`LITERAL_EDITS` (a string a move makes wrong, a README row), rewrites the
   arrows block of README's Layout from the package graph ``tests/test_import_graph.py``
   computes, then runs ``ruff format`` and ``ruff check --fix``; prints a summary.

The table is the only place a move is stated: old dotted module -> new dotted module. An
old module whose name becomes a package (``evals.sandbox`` -> ``evals.sandbox.pool``, with
``evals.sandbox.workers`` beside it) is told apart from the new package by the move's
state: while the move is pending a reference to ``akka_optimize.evals.sandbox`` means the
old module; once it is done it means the package.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = "akka_optimize"
A = PKG + "."

MOVES: list[tuple[str, str]] = [
    # item 1: what the service does without HTTP, into core/
    ("service.context", "core.context"),
    ("service.auth", "core.auth"),
    ("service.access", "core.access.rules"),
    ("service.access_registry", "core.access.registry"),
    ("service.access_runs", "core.access.runs"),
    ("service.access_scope", "core.access.scope"),
    ("service.routers.tinker_access", "core.access.tinker"),
    ("service.inputs", "core.inputs"),
    ("service.plans", "core.plans"),
    ("service.job_kinds", "core.job_kinds"),
    ("service.recipe_runs", "core.recipes.runs"),
    ("service.recipe_paths", "core.recipes.paths"),
    ("service.routers.endpoint_records", "core.endpoint_records"),
    ("service.routers.sweep_body", "core.sweep_body"),
    ("service.pipelines", "core.pipelines.records"),
    ("service.pipeline_runs", "core.pipelines.runs"),
    ("service.pipeline_shape", "core.pipelines.shape"),
    ("service.pipeline_stages", "core.pipelines.stages"),
    ("service.pipeline_views", "core.pipelines.views"),
    ("service.adapter_imports", "core.adapter_imports"),
    # item 5: one family, one subpackage
    ("jobs.capacity", "jobs.capacity.usage"),
    ("jobs.capacity_claims", "jobs.capacity.claims"),
    ("jobs.capacity_ledger", "jobs.capacity.ledger"),
    ("jobs.capacity_pools", "jobs.capacity.pools"),
    ("engine.session", "engine.session.training"),
    ("engine.session_passes", "engine.session.passes"),
    ("engine.session_ranks", "engine.session.ranks"),
    ("engine.session_state", "engine.session.state"),
    ("engine.rl", "engine.rl.loop"),
    ("engine.rl_async", "engine.rl.offpolicy"),
    ("engine.rl_gap", "engine.rl.gap"),
    ("engine.rl_ranks", "engine.rl.ranks"),
    ("engine.rl_settings", "engine.rl.settings"),
    ("engine.rl_step", "engine.rl.step"),
    ("engine.dpo", "engine.dpo.update"),
    ("engine.dpo_loop", "engine.dpo.loop"),
    ("engine.dpo_loss", "engine.dpo.loss"),
    ("plan.rules", "plan.rules.check"),
    ("plan.rules_engine", "plan.rules.engine"),
    ("plan.rules_facts", "plan.rules.facts"),
    ("plan.rules_identity", "plan.rules.identity"),
    ("plan.rules_resources", "plan.rules.resources"),
    ("plan.rules_training", "plan.rules.training"),
    ("plan.schema", "plan.schema.run"),
    ("plan.schema_base", "plan.schema.base"),
    ("plan.schema_config", "plan.schema.config"),
    ("plan.schema_dpo", "plan.schema.dpo"),
    ("plan.schema_execution", "plan.schema.execution"),
    ("plan.schema_hyperparams", "plan.schema.hyperparams"),
    ("evals.sandbox", "evals.sandbox.pool"),
    ("evals.sandbox_scratch", "evals.sandbox.scratch"),
    ("evals.sandbox_types", "evals.sandbox.records"),
    ("evals.sandbox_workers", "evals.sandbox.workers"),
    ("evals.sandbox_child", "evals.sandbox.child"),  # a folder: moved whole
    ("evals.curation", "evals.curation.kind"),
    ("evals.curation_judging", "evals.curation.judging"),
    ("evals.curation_request", "evals.curation.request"),
    ("data.prepared", "data.prepared.rows"),
    ("data.prepared_canonical", "data.prepared.canonical"),
    ("data.prepared_descriptor", "data.prepared.descriptor"),
    ("catalog.selection", "catalog.selection.machine"),
    ("catalog.selection_manager", "catalog.selection.manager"),
    ("catalog.selection_rows", "catalog.selection.rows"),
    ("cli.registry", "cli.registry.commands"),
    ("cli.registry_output", "cli.registry.output"),
    ("cli.registry_packing", "cli.registry.packing"),
    ("cli.registry_transfer", "cli.registry.transfer"),
    ("cli.runs", "cli.runs.start"),
    ("cli.runs_follow", "cli.runs.follow"),
    ("cli.runs_format", "cli.runs.settings_text"),
    ("cli.run_commands", "cli.runs.reading"),
    ("cli.run_lineage", "cli.runs.lineage"),
    ("cli.run_states", "cli.runs.states"),
    # reinforcement training out of evals/, beside jobs/ (it grades with evals' graders,
    # so it cannot sit inside jobs/, which evals/ imports)
    ("evals.rl_kind", "reinforcement.kind"),
    ("evals.rl_worker", "reinforcement.worker"),
    ("evals.rewards", "reinforcement.rewards"),
    # the routers of one surface together (one router per resource still)
    ("service.routers.openai_chat", "service.routers.openai.chat"),
    ("service.routers.openai_common", "service.routers.openai.common"),
    ("service.routers.openai_files", "service.routers.openai.files"),
    ("service.routers.openai_ft_jobs", "service.routers.openai.ft_jobs"),
    ("service.routers.openai_graders", "service.routers.openai.graders"),
    ("service.routers.tinker", "service.routers.tinker.protocol"),
    ("service.routers.tinker_rest", "service.routers.tinker.rest"),
    ("service.routers.tinker_sampling", "service.routers.tinker.sampling"),
    ("service.routers.tinker_worker", "service.routers.tinker.worker"),
    ("service.routers.endpoints", "service.routers.endpoints.routes"),
    ("service.routers.endpoint_forwarding", "service.routers.endpoints.forwarding"),
    ("service.routers.endpoint_judges", "service.routers.endpoints.judges"),
    ("service.routers.registry", "service.routers.registry.routes"),
    ("service.routers.registry_tinker", "service.routers.registry.from_tinker"),
    ("service.routers.registry_transfer", "service.routers.registry.transfer"),
    ("core.endpoint_records", "core.endpoints.records"),
    ("core.endpoint_lifecycle", "core.endpoints.lifecycle"),
    ("core.judge_endpoints", "core.endpoints.judges"),
    # what grades an answer, apart from the evaluations that use it (curations and
    # reinforcement rewards grade with it too)
    ("evals.graders", "evals.graders.spec"),
    ("evals.judges", "evals.graders.judges"),
    ("evals.judge_client", "evals.graders.judge_client"),
    ("evals.eval_request", "evals.request"),
    ("evals.eval_views", "evals.views"),
]
"""Old module -> new module, both relative to ``akka_optimize``."""

STUBS: list[str] = ["service.routers.sampling"]
"""Modules that only re-export names whose home is elsewhere: deleted, importers pointed home."""

SYMBOL_MOVES: list[tuple[str, str, str]] = [
    ("service.routers.curations", "check_request", "core.requests"),
    ("service.routers.evaluations", "prepare", "core.requests"),
    ("service.routers.registry_transfer", "uploads_dir", "core.uploads"),
    ("service.routers.registry_transfer", "registry_limits", "core.uploads"),
    ("service.routers.registry_transfer", "base_dir_for", "core.uploads"),  # before its caller
    ("service.routers.registry_transfer", "check_upload", "core.uploads"),
    ("service.routers.registry_transfer", "safe_versions", "core.uploads"),
    ("service.routers.registry_transfer", "extract_tar", "core.uploads"),
    # then named client_model_name, new_training_client and fail_if_run_ended by hand
    ("service.routers.tinker", "_model_name", "core.tinker_clients"),  # before its caller
    ("service.routers.tinker", "_new_model", "core.tinker_clients"),
    ("service.routers.tinker", "_check_run", "core.tinker_clients"),
    # then named worker_answer_result and run_marks by hand
    ("service.routers.tinker_worker", "_answer_result", "core.tinker_clients"),
    ("service.routers.tinker_worker", "_run_marks", "core.tinker_clients"),
]
"""(module, top-level function, new module): logic a router holds that the core calls (a
pipeline's stages check a curation and an evaluation as their routes do). The function's
text moves as it is, with the imports it uses; the router imports it back. A call through
the old module's alias (``transfer.uploads_dir(...)``) is not rewritten: the full suite
fails on it (AttributeError), and it is fixed by hand."""

MODULE_DOCS: dict[str, str] = {
    "core.requests": "The checks of a curation request and of an evaluation (or comparison)\n"
    "request for a caller: the routes and a pipeline's stages call the same function.",
    "core.uploads": "An uploaded adapter or archive on its way into the registry: where uploads\n"
    "spool, the registry's limits, unpacking an archive within them, and checking an adapter\n"
    "against its base model's cached weights (F118). The upload routes and adapter imports\n"
    "(:mod:`akka_optimize.core.adapter_imports`) call the same functions.",
    "core.tinker_clients": "Tinker training clients (TINKER-PROTOCOL.md ``create_model``,\n"
    "``load_weights``): the run a new client trains in, its model in the session's broker,\n"
    "and failing a client's futures once its run has ended. The protocol's routes call them.",
}
"""The docstring of a module :data:`SYMBOL_MOVES` creates."""

NAME_HOMES: dict[tuple[str, str], tuple[str, str]] = {
    ("service.routers.evaluations", "EvaluationCreate"): ("plan.pipeline", "EvaluationRequest"),
}
"""(module, name) -> (home module, home name): an alias importers reach through a router,
imported from its home instead."""

PACKAGE_DOCS: dict[str, str] = {
    "core.access": "Who may see and change what: the access rules every route, the CLI and the\n"
    "dashboard apply (:mod:`.rules`), in the terms of :mod:`.scope`, for registry artifacts\n"
    "(:mod:`.registry`), runs (:mod:`.runs`) and the Tinker protocol (:mod:`.tinker`).",
    "data.prepared": "Prepared token rows (seeds/001 F029, F030): reading and checking them\n"
    "(:mod:`.rows`), the registry's canonical form (:mod:`.canonical`) and the\n"
    "``prepared.json`` descriptor (:mod:`.descriptor`).",
    "catalog.selection": "Base-model selections: the state machine and listing (:mod:`.machine`),\n"
    "the selection row (:mod:`.rows`) and the background fetcher (:mod:`.manager`).",
    "cli.registry": "The ``registry`` commands (:mod:`.commands`), their text output\n"
    "(:mod:`.output`), packing local files for an upload (:mod:`.packing`) and moving bytes to\n"
    "and from the registry routes (:mod:`.transfer`).",
    "cli.runs": "The ``training runs`` commands: start and the dry run (:mod:`.start`), reading\n"
    "runs (:mod:`.reading`), lineage (:mod:`.lineage`), saves and control (:mod:`.states`),\n"
    "following a run (:mod:`.follow`) and older runs' settings text (:mod:`.settings_text`).",
    "core.recipes": "Recipe runs: ``minifield-worker`` recipes submitted to the service\n"
    "(:mod:`.runs`) and where a recipe may read (:mod:`.paths`).",
    "core.pipelines": "Pipelines: a descriptor of ordered stages run one after another as jobs\n"
    "(:mod:`.records`), its form (:mod:`.shape`), its stages (:mod:`.stages`), how it moves\n"
    "on (:mod:`.runs`) and its views (:mod:`.views`).",
    "jobs.capacity": "Capacity: device pools (:mod:`.pools`), claims (:mod:`.claims`), the ledger\n"
    "of who holds and waits (:mod:`.ledger`) and the capacity report (:mod:`.usage`).",
    "engine.session": "The LoRA training session (:mod:`.training`), its passes (:mod:`.passes`),\n"
    "its ranks on several devices (:mod:`.ranks`) and its saved state (:mod:`.state`).",
    "engine.rl": "Group-relative reinforcement updates: the loop (:mod:`.loop`), one update\n"
    "(:mod:`.step`), its settings (:mod:`.settings`), off-policy rollouts\n"
    "(:mod:`.offpolicy`), the log-probability gap (:mod:`.gap`) and ranks (:mod:`.ranks`).",
    "engine.dpo": "Preference training: one update (:mod:`.update`), the loop (:mod:`.loop`)\n"
    "and the losses (:mod:`.loss`).",
    "plan.rules": "The rules a parsed plan must pass (:mod:`.check` runs them all), one module\n"
    "per concern, over the facts of :mod:`.facts`.",
    "plan.schema": "The run descriptor (:mod:`.run`) and its groups: the base of every body\n"
    "(:mod:`.base`), ``config``, ``execution``, the hyperparameters and ``dpoHyperparams``.",
    "evals.sandbox": "Running a bundle's grader outside the service's process, with limits: the\n"
    "pool (:mod:`.pool`), its workers (:mod:`.workers`), their scratch space\n"
    "(:mod:`.scratch`), the records (:mod:`.records`) and the child process (:mod:`.child`).",
    "service.routers.openai": "OpenAI's API served by the platform: chat completions (:mod:`.chat`),\n"
    "files (:mod:`.files`), fine-tuning jobs (:mod:`.ft_jobs`) and graders (:mod:`.graders`),\n"
    "with the request reading and error shape they share (:mod:`.common`); the logic is\n"
    ":mod:`akka_optimize.core.openai_ft`.",
    "service.routers.tinker": "The Tinker SDK's routes: the session protocol (:mod:`.protocol`), the\n"
    "RestClient's runs and checkpoints (:mod:`.rest`), sampling (:mod:`.sampling`) and the\n"
    "training client's worker poll (:mod:`.worker`).",
    "service.routers.endpoints": "Endpoints: their routes and OpenAI-compatible forwarding\n"
    "(:mod:`.routes`), waiting for a worker and forwarding to it (:mod:`.forwarding`) and an\n"
    "evaluation's ``model:`` judge (:mod:`.judges`).",
    "service.routers.registry": "The registry's routes: datasets, bundles, models, images, aliases\n"
    "and annotations (:mod:`.routes`), a Tinker checkpoint registered as a model version\n"
    "(:mod:`.from_tinker`), and streaming bodies in and out (:mod:`.transfer`).",
    "core.endpoints": "Endpoint records (:mod:`.records`), an endpoint's life: create, list,\n"
    "delete, detach (:mod:`.lifecycle`), and the endpoints that serve evaluations' ``model:``\n"
    "judges (:mod:`.judges`).",
    "evals.graders": "What grades an answer: grader specifications and the submit-time check\n"
    "of a bundle's entry (:mod:`.spec`), ``model:`` judges' instructions and scores\n"
    "(:mod:`.judges`) and a worker's requests to a judge endpoint (:mod:`.judge_client`); the\n"
    "sandbox that runs a bundle's code is :mod:`akka_optimize.evals.sandbox`.",
    "evals.curation": "Curations: the ``curate`` kind (:mod:`.kind`), the request check\n"
    "(:mod:`.request`) and what a worker does (:mod:`.judging`).",
    "reinforcement": "Reinforcement runs (``config.method: rl``): the ``rl`` job kind (:mod:`.kind`),\n"
    "its worker (:mod:`.worker`) and the rewards graded with the evaluations' graders\n"
    "(:mod:`.rewards`); the engine's loop is :mod:`akka_optimize.engine.rl`.",
}
"""A docstring for each package the moves create (what the package owns)."""

LITERAL_EDITS: list[tuple[str, str, str]] = [
    (
        "src/akka_optimize/evals/sandbox/workers.py",
        'CHILD = Path(__file__).with_name("sandbox_child")',
        'CHILD = Path(__file__).with_name("child")',
    ),
    (
        "README.md",
        "| `core/` | application logic that is neither HTTP nor engine; `core/openai_ft/`:",
        "| `core/` | what the service does without HTTP, called by the routers, the CLI and the "
        "dashboard: the run context, auth, access rules (`core/access/`), plans, pipelines "
        "(`core/pipelines/`), recipe runs (`core/recipes/`), endpoint records, sweep bodies, "
        "request checks (`inputs.py`, `requests.py`); `core/openai_ft/`:",
    ),
    (
        "README.md",
        "| `ui/` | the web dashboard",
        "| `reinforcement/` | reinforcement runs: the `rl` job kind, its worker, rewards graded "
        "with the evaluations' graders (`engine/rl/` is the loop) |\n| `ui/` | the web dashboard",
    ),
]
"""(file, text, replacement): applied once; skipped when the replacement is already there."""

TEXT_FILES = ["README.md", "tests/README.md", "Makefile", "pyproject.toml"]
PY_DIRS = ["src", "tests", "benchmarks", "examples", "scripts"]
ARROWS_MARK = "package: packages it may import"
CHAIN = re.compile(r"(?<![\w.])akka_optimize(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])((?:src/)?akka_optimize/)?((?:[A-Za-z_]\w*/)+[A-Za-z_]\w*\.py)\b")


@dataclass
class Plan:
    """The state of the table against the working tree."""

    active: dict[str, str] = field(default_factory=dict)  # old -> new (pending or done), full
    pending: list[tuple[str, str]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    stubs: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # stub -> names
    stubs_pending: list[str] = field(default_factory=list)
    new_all: set[str] = field(default_factory=set)  # new modules and every package above them
    collide_pending: set[str] = field(default_factory=set)  # old module == new package, pending
    rewritten: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def module_path(name: str) -> Path | None:
    """The file or folder of a dotted module (``akka_optimize.a.b``), or None when absent."""
    base = SRC.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base
    return None


def module_name_of(path: Path) -> str:
    """Dotted name of a Python file (``src/`` stripped; ``__init__`` names its package)."""
    rel = path.relative_to(SRC if path.is_relative_to(SRC) else ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """Absolute module of ``from {'.' * level}{target} import …`` written in ``module``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def stub_names(path: Path, name: str) -> dict[str, tuple[str, str]] | None:
    """``exported name -> (home module, home name)`` of a pure re-export module, else None."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            home = (
                resolve_relative(name, False, node.level, node.module)
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                out[alias.asname or alias.name] = (home, alias.name)
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__all__"
        ]:
            continue
        return None
    return out


def make_plan() -> Plan:
    """Each move and stub decided against the tree as it is now."""
    plan = Plan()
    for old, new in MOVES:
        old_full, new_full = A + old, A + new
        here, there = module_path(old_full), module_path(new_full)
        if new_full.startswith(old_full + ".") and here is not None and here.is_dir():
            here = None  # the old module's name is the new package's: only its file counts
        if here is not None and there is None:
            plan.pending.append((old_full, new_full))
            plan.active[old_full] = new_full
        elif here is None and there is not None:
            plan.done.append(old_full)
            plan.active[old_full] = new_full
        elif here is None:
            plan.missing.append(f"{old} -> {new}: neither exists; skipped")
        else:
            plan.blocked.append(f"{old} -> {new}: both exist; skipped")
    for new_full in plan.active.values():
        parts = new_full.split(".")
        plan.new_all.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    pending_old = {old for old, _ in plan.pending}
    plan.collide_pending = pending_old & plan.new_all
    for stub in STUBS:
        full = A + stub
        path = module_path(full)
        if path is None:
            plan.done.append(f"{full} (stub, deleted)")
            continue
        names = stub_names(path, full) if path.is_file() else None
        if names is None:
            plan.blocked.append(f"{stub}: no longer only re-exports; kept")
            continue
        plan.stubs[full] = names
        plan.stubs_pending.append(full)
    for old in sorted(plan.collide_pending):
        path = module_path(old)
        if path is not None and path.is_file():
            defined = _top_level_names(path)
            siblings = {n.rsplit(".", 1)[1] for n in plan.new_all if n.startswith(old + ".")}
            clash = sorted(defined & siblings)
            if clash:
                plan.notes.append(f"{old} defines {clash}, named like the new package's modules")
    return plan


def current(plan: Plan, module: str) -> str:
    """Where a module of the table lies now (its new name once its move is done)."""
    return plan.active[module] if module in plan.done else module


def move_symbols(plan: Plan, dry_run: bool) -> list[str]:
    """Each :data:`SYMBOL_MOVES` function cut from its module and appended to the new one
    with the imports it uses (relative ones counted again from the new place); the old
    module imports it back when it still calls it. Importers elsewhere are pointed at the
    new home by the rewrite that follows (the move is entered in ``plan.stubs``)."""
    out = []
    for (module, name), (home, home_name) in NAME_HOMES.items():
        plan.stubs.setdefault(A + module, {})[name] = (A + home, home_name)
    for module, name, target in SYMBOL_MOVES:
        src_name, dst_name = current(plan, A + module), A + target
        plan.stubs.setdefault(src_name, {})[name] = (dst_name, name)
        if A + module != src_name:
            plan.stubs.setdefault(A + module, {})[name] = (dst_name, name)
        src, dst = module_path(src_name), module_path(dst_name)
        if src is None or not src.is_file():
            out.append(f"{module}.{name}: {module} absent; skipped")
            continue
        tree = ast.parse(src.read_text(encoding="utf-8"))
        found = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.name == name
        ]
        if not found:
            there = dst is not None and name in _top_level_names(dst)
            out.append(f"{module}.{name}: " + ("already moved" if there else "not found; skipped"))
            continue
        problem = _cut_and_paste(src, src_name, tree, found[0], dst_name, dry_run)
        out.append(f"{module}.{name} -> {target}" + (f": {problem}" if problem else ""))
    return out


def _cut_and_paste(
    src: Path, src_name: str, tree: ast.Module, node: ast.stmt, dst_name: str, dry_run: bool
) -> str | None:
    text = src.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    last = node.end_lineno or node.lineno
    segment_lines = lines[first - 1 : last]
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    defined = _top_level_names(src) - _imported_names(tree)
    locals_needed = sorted(used & defined - {getattr(node, "name", "")})
    if locals_needed:
        return f"uses {locals_needed} of its module; not moved"
    imports = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            base = (
                resolve_relative(src_name, False, stmt.level, stmt.module)
                if stmt.level
                else stmt.module or ""
            )
            if base == dst_name:  # a name of the new home itself (moved there earlier)
                continue
            for alias in stmt.names:
                if (alias.asname or alias.name) in used:
                    spelled = spell(base, dst_name, False, stmt.level > 0)
                    imports.append(_statement(spelled, alias.name, alias.asname))
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if (alias.asname or alias.name).split(".")[0] in used:
                    imports.append(
                        f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    )
    # imports inside the function, relative to its old place, counted from the new one
    segment = "".join(segment_lines)
    inner = [n for n in ast.walk(node) if isinstance(n, ast.ImportFrom) and n.level]
    for n in sorted(inner, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        base = resolve_relative(src_name, False, n.level, n.module)
        row = segment.splitlines(keepends=True)
        at = sum(len(r) for r in row[: n.lineno - first]) + n.col_offset
        end = sum(len(r) for r in row[: (n.end_lineno or n.lineno) - first]) + (
            n.end_col_offset or 0
        )
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in n.names)
        segment = (
            segment[:at]
            + f"from {spell(base, dst_name, False, True)} import {names}"
            + segment[end:]
        )
    if dry_run:
        return None
    dst = SRC.joinpath(*dst_name.split(".")).with_suffix(".py")
    if dst.exists():
        body = dst.read_text(encoding="utf-8")
        head, _, rest = body.partition("\n\n\n")
        new_dst = (
            head + "\n" + "\n".join(imports) + "\n\n\n" + rest.rstrip("\n") + "\n\n\n" + segment
        )
    else:
        doc = MODULE_DOCS.get(dst_name[len(A) :], f"Moved from :mod:`{src_name}`.")
        new_dst = (
            f'"""{doc}\n"""\n\nfrom __future__ import annotations\n\n'
            + "\n".join(imports)
            + "\n\n\n"
            + segment
        )
    dst.write_text(new_dst, encoding="utf-8")
    rest_text = "".join(lines[: first - 1]) + "".join(lines[last:])
    name = getattr(node, "name", "")
    still_used = any(
        isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(rest_text))
    )
    if still_used:
        back = _statement(spell(dst_name, src_name, False, True), name, None)
        tops = [n for n in ast.parse(rest_text).body if isinstance(n, ast.Import | ast.ImportFrom)]
        after = max(n.end_lineno or n.lineno for n in tops)
        rows = rest_text.splitlines(keepends=True)
        rest_text = "".join(rows[:after]) + back + "\n" + "".join(rows[after:])
    src.write_text(rest_text, encoding="utf-8")
    return None


def _imported_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _top_level_names(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def map_chain(plan: Plan, dotted: str) -> str | None:
    """The new spelling of a dotted reference (module, or module then attributes), or
    None when it names nothing moved. The longest known prefix decides."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        rest = parts[k:]
        if prefix in plan.new_all and prefix not in plan.collide_pending:
            return None
        if prefix in plan.active:
            return ".".join([plan.active[prefix], *rest])
        if prefix in plan.stubs and rest and rest[0] in plan.stubs[prefix]:
            home, name = plan.stubs[prefix][rest[0]]
            return ".".join([home, name, *rest[1:]])
    return None


def _statement(module: str, name: str, asname: str | None) -> str:
    alias = f" as {asname}" if asname and asname != name else ""
    return f"from {module} import {name}{alias}"


def spell(target: str, home: str, is_package: bool, relative: bool) -> str:
    """``target`` as the module of a ``from … import`` written in module ``home`` (its name
    after the moves): relative when the statement was, so a file keeps its style."""
    if not relative:
        return target
    base = home.split(".") if is_package else home.split(".")[:-1]
    parts = target.split(".")
    common = 0
    while common < min(len(base), len(parts)) and base[common] == parts[common]:
        common += 1
    return "." * (len(base) - common + 1) + ".".join(parts[common:])


def rewrite_import_from(
    plan: Plan, node: ast.ImportFrom, module: str, is_package: bool, moving: bool
) -> list[str] | None:
    """The statements replacing one ``from … import …``, or None to keep it as written.
    A relative import stays relative, counted from where the file lies after the moves."""
    if node.module == "__future__":
        return None
    base = (
        resolve_relative(module, is_package, node.level, node.module)
        if node.level
        else node.module or ""
    )
    if base != PKG and not base.startswith(A):
        return None
    names = [a for a in node.names if a.name != "*"]
    if (
        base in plan.collide_pending
        and names
        and all(f"{base}.{a.name}" in plan.new_all for a in names)
    ):
        return None  # already the new package's modules
    kept: list[str] = []
    moved: list[str] = []
    home = (map_chain(plan, module) or module) if moving else module
    rel = node.level > 0

    def statement(target: str, name: str, asname: str | None) -> str:
        return _statement(spell(target, home, is_package, rel), name, asname)

    new_base = map_chain(plan, base) or base
    changed = new_base != base
    for alias in node.names:
        full = f"{base}.{alias.name}"
        is_new = full in plan.new_all and full not in plan.collide_pending
        if full in plan.active and not is_new:
            parent, _, leaf = plan.active[full].rpartition(".")
            moved.append(statement(parent, leaf, alias.asname or alias.name))
            changed = True
        elif base in plan.stubs and alias.name in plan.stubs[base]:
            moved.append(statement(*plan.stubs[base][alias.name], alias.asname or alias.name))
            changed = True
        else:
            kept.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
    if not changed and not (node.level and moving):
        return None
    out = (
        [f"from {spell(new_base, home, is_package, rel)} import {', '.join(kept)}"] if kept else []
    )
    return out + moved


def rewrite_python(plan: Plan, path: Path, text: str) -> str:
    """``text`` of a Python file with every reference to a moved module or stub rewritten."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        plan.notes.append(f"{path.relative_to(ROOT)}: not parsed ({exc.msg}); only text rewritten")
        return rewrite_text(plan, text)
    module = module_name_of(path)
    is_package = path.name == "__init__.py"
    moving = any(module == old or module.startswith(old + ".") for old, _ in plan.pending)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    spans: list[tuple[int, int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            begin = offset(node.lineno, node.col_offset)
            end = offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
            new = rewrite_import_from(plan, node, module, is_package, moving)
            indent = "\n" + " " * node.col_offset
            spans.append((begin, end, None if new is None else indent.join(new)))
    spans.sort()
    out: list[str] = []
    cursor = 0
    for begin, end, new in spans:
        out.append(rewrite_text(plan, text[cursor:begin]))
        out.append(text[begin:end] if new is None else new)
        cursor = end
    out.append(rewrite_text(plan, text[cursor:]))
    return "".join(out)


def rewrite_text(plan: Plan, text: str) -> str:
    """Dotted names ``akka_optimize.a.b`` and paths ``a/b.py`` of moved modules rewritten."""

    def chain(match: re.Match[str]) -> str:
        return map_chain(plan, match.group(0)) or match.group(0)

    def path(match: re.Match[str]) -> str:
        prefix, rel = match.group(1) or "", match.group(2)
        dotted = A + rel[: -len(".py")].replace("/", ".")
        new = map_chain(plan, dotted)
        if new is None or not dotted.startswith(A):
            return match.group(0)
        new_rel = new[len(A) :].replace(".", "/")
        return prefix + new_rel + ".py"

    return PATH.sub(path, CHAIN.sub(chain, text))


def files_to_rewrite() -> list[Path]:
    """Tracked and untracked (not ignored) files the references live in, this script excepted."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *PY_DIRS, *TEXT_FILES],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    me = Path(__file__).resolve()
    out = []
    for rel in sorted(set(listed)):
        path = ROOT / rel
        if path.resolve() == me or not path.is_file():
            continue
        if path.suffix == ".py" or rel in TEXT_FILES:
            out.append(path)
    return out


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True)


def apply_moves(plan: Plan) -> list[str]:
    """``git mv`` each pending move; ``__init__.py`` with a docstring for each new package."""
    made = []
    for old, new in plan.pending:
        src = module_path(old)
        assert src is not None
        dest_base = SRC.joinpath(*new.split("."))
        dest = dest_base if src.is_dir() else dest_base.with_suffix(".py")
        dest.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(src.relative_to(ROOT)), str(dest.relative_to(ROOT)))
        made.append(f"{old[len(A) :]} -> {new[len(A) :]}")
    for package, doc in sorted(PACKAGE_DOCS.items()):
        init = SRC.joinpath(*(A + package).split(".")) / "__init__.py"
        if init.parent.is_dir() and not init.exists():
            init.write_text(f'"""{doc}\n"""\n', encoding="utf-8")
            git("add", str(init.relative_to(ROOT)))
            made.append(f"new package {package} (__init__.py)")
    for stub in plan.stubs_pending:
        path = module_path(stub)
        assert path is not None
        git("rm", "-q", str(path.relative_to(ROOT)))
        made.append(f"stub {stub[len(A) :]} deleted")
    return made


def apply_literal_edits() -> list[str]:
    """Each edit of :data:`LITERAL_EDITS` once; a missing text is reported."""
    out = []
    for rel, old, new in LITERAL_EDITS:
        path = ROOT / rel
        if not path.is_file():
            out.append(f"{rel}: absent; edit skipped")
            continue
        text = path.read_text(encoding="utf-8")
        if new in text:
            continue
        if old not in text:
            out.append(f"{rel}: text {old[:50]!r}… not found; edit skipped")
            continue
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        out.append(f"{rel}: edited ({old[:40]!r}…)")
    return out


def update_arrows() -> list[str]:
    """README's arrows block set to the packages' imports as they now are: a line whose
    package imports other packages than it lists is rewritten, a new package's line goes
    after the lines of the packages it imports, a package gone is dropped."""
    spec = importlib.util.spec_from_file_location("_graph", ROOT / "tests" / "test_import_graph.py")
    assert spec and spec.loader
    graph_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph_mod)
    graph = graph_mod.package_graph(graph_mod.import_graph())
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    start = text.index(ARROWS_MARK)
    end = text.index("```", start)
    lines = text[start:end].splitlines()
    head, body = lines[0], [line for line in lines[1:] if line.strip()]
    order = [line.partition(":")[0].strip() for line in body]
    listed = {line.partition(":")[0].strip(): line for line in body}
    out: list[str] = []
    changes = []
    order = [p for p in order if p in graph]
    changes += [f"arrows: {p} dropped" for p in listed if p not in graph]
    for new in sorted(set(graph) - set(order)):
        after = max((order.index(t) for t in graph[new] if t in order), default=-1)
        order.insert(after + 1, new)
        changes.append(f"arrows: {new} added")
    for p in order:
        line = f"{p}: {' '.join(sorted(graph[p]))}".rstrip() if p in graph else listed[p]
        if p in listed and set(listed[p].partition(":")[2].split()) == graph[p]:
            line = listed[p]
        elif p in listed:
            changes.append(f"arrows: {line}")
        out.append(line)
    new_text = text[:start] + "\n".join([head, *out]) + "\n" + text[end:]
    if new_text != text:
        readme.write_text(new_text, encoding="utf-8")
    return changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
    parser.add_argument("--no-ruff", action="store_true", help="skip ruff format/check")
    args = parser.parse_args()
    plan = make_plan()
    symbols = move_symbols(plan, args.dry_run)
    for path in files_to_rewrite():
        text = path.read_text(encoding="utf-8")
        new = rewrite_python(plan, path, text) if path.suffix == ".py" else rewrite_text(plan, text)
        if new != text:
            plan.rewritten.append(str(path.relative_to(ROOT)))
            if not args.dry_run:
                path.write_text(new, encoding="utf-8")
    made = [] if args.dry_run else apply_moves(plan)
    if not args.dry_run:
        for _, _, target in SYMBOL_MOVES:
            path = module_path(A + target)
            if path is not None:
                git("add", "-N", str(path.relative_to(ROOT)))
    edits = [] if args.dry_run else apply_literal_edits()
    arrows = [] if args.dry_run else update_arrows()
    ruff = []
    if not args.dry_run and not args.no_ruff:
        exe = Path(sys.executable).with_name("ruff")
        ruff_cmd = str(exe) if exe.exists() else "ruff"
        dirs = [d for d in PY_DIRS if (ROOT / d).is_dir()]
        for cmd in ([ruff_cmd, "check", "--fix", "-q", *dirs], [ruff_cmd, "format", "-q", *dirs]):
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            ruff.append(f"{' '.join(cmd[1:3])}: exit {done.returncode}")
            if done.returncode:
                ruff.append(done.stdout[-3000:] + done.stderr[-2000:])
    print(f"moves: {len(plan.pending)} pending, {len(plan.done)} already done")
    for line in made or [f"would move {o[len(A) :]} -> {n[len(A) :]}" for o, n in plan.pending]:
        print("  " + line)
    for title, items in (
        ("already done", plan.done),
        ("missing (skipped)", plan.missing),
        ("blocked (skipped)", plan.blocked),
        ("notes", plan.notes),
        ("functions moved", symbols),
        ("literal edits", edits),
        ("README arrows", arrows),
        ("ruff", ruff),
    ):
        if items:
            print(f"{title}:")
            for item in items:
                print("  " + item)
    print(f"files rewritten: {len(plan.rewritten)}")
    for rel in plan.rewritten:
        print("  " + rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
