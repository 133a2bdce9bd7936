"""The service's runtime is typed and built once (issue 49 item 2): no string-keyed
``extras``, no ``ctx: Any``, and every job kind listed in one place
(``core/job_kinds.py``), registered by building the runtime, never by an import."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

from akka_optimize.core.context import ServiceContext
from akka_optimize.core.job_kinds import KINDS

ROOT = Path(__file__).resolve().parents[1] / "src" / "akka_optimize"


def test_the_context_keeps_nothing_under_a_string_key() -> None:
    fields = {f.name: str(f.type) for f in dataclasses.fields(ServiceContext)}
    assert "extras" not in fields
    assert all("Any" not in t and "dict[" not in t for t in fields.values()), fields
    runtime = {"dev_secret", "executor", "scheduler", "endpoints", "base_models", "tinker_broker"}
    assert runtime <= set(fields)


def test_no_function_takes_an_untyped_context() -> None:
    """Every ``ctx`` parameter names its type: the service's context, or the part jobs,
    evaluations, Tinker and the OpenAI fine-tuning core read of it
    (``jobs.context.JobContext``)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                if arg.arg.lstrip("_") != "ctx":
                    continue
                text = ast.unparse(arg.annotation) if arg.annotation else "(none)"
                if text in ("Any", "(none)", "object"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({text})")
    assert not found, "untyped ctx parameters:\n" + "\n".join(found)


def test_every_kind_is_listed_once_and_an_import_registers_none() -> None:
    """Importing every kind's module (and every router) registers nothing; building the
    app registers exactly the kinds of ``KINDS`` (a fresh interpreter, so no other test's
    registrations count)."""
    names = [k.name for k in KINDS]
    assert sorted(names) == ["compare", "curate", "dpo", "eval", "recipe", "rl", "sft", "tinker"]
    script = (
        "import os, tempfile\n"
        "os.environ['AKKA_OPTIMIZE_HOME'] = tempfile.mkdtemp()\n"
        "from akka_optimize.jobs import kinds, scheduler\n"
        "import akka_optimize.core.job_kinds, akka_optimize.service.app as app\n"
        "print(','.join(kinds.registered_kinds()))\n"
        "print(','.join(sorted(scheduler._TICK_HOOKS)))\n"
        "app.create_app()\n"
        "print(','.join(kinds.registered_kinds()))\n"
        "print(','.join(sorted(scheduler._TICK_HOOKS)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["", "", ",".join(sorted(names)), "pipelines,recipes"]


def test_every_listed_kind_names_a_worker_function_that_exists() -> None:
    """A kind's ``worker`` string (``module:function``) is looked up only when a run
    starts: a module moved or a re-export deleted would fail every run of that kind in
    its worker (a pipeline's curate stage did, once), so each is imported here."""
    for kind in KINDS:
        module, _, name = kind.worker.partition(":")
        target = getattr(importlib.import_module(module), name, None)
        assert callable(target), f"{kind.name}: {kind.worker} names no function"
        assert target.__module__ == module, f"{kind.name}: {kind.worker} is a re-export"


def test_the_fork_server_belongs_to_the_runtime_and_ends_with_it(tmp_path, monkeypatch) -> None:
    """The executor and the endpoint manager fork CPU workers with the runtime's own fork
    server (``ServiceContext.forker``; no module holds one), and shutdown ends it."""
    from akka_optimize import forkserver
    from akka_optimize.core.endpoints.records import manager
    from service_app import in_process

    kept = [v for v in vars(forkserver).values() if isinstance(v, forkserver.ForkServer)]
    assert not kept and "global " not in Path(forkserver.__file__).read_text()
    with in_process(tmp_path / "home", monkeypatch) as svc:
        ctx = svc.app.state.ctx
        assert ctx.executor.forker is ctx.forker and manager(ctx).forker is ctx.forker
        child = ctx.forker.fork("timeit", ["-n", "3", "pass"], {}, tmp_path / "child.log")
        assert child is not None and child.wait(timeout=120) == 0
        server = child.server.proc
        assert server.poll() is None and "3 loops" in (tmp_path / "child.log").read_text()
    assert server.poll() is not None  # ended at shutdown
