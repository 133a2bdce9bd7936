"""The endpoint worker process: ``python -m akka_optimize.serving.worker --spec FILE``.

One worker holds one resident base model and any number of its adapters behind a
serving engine (DESIGN.md "Where a run executes": the service never runs models
in its own process). It listens on a free loopback port and answers:

- ``POST /v1/chat/completions`` and ``GET /v1/models`` (OpenAI-compatible; the
  ``model`` field names the base model or an adapter);
- ``GET /health``; ``POST /admin/adapters`` (load), ``DELETE /admin/adapters/{name}``,
  ``PUT /admin/instructions`` — used by the service.

Every route needs ``Authorization: Bearer $AKKA_SERVING_TOKEN`` when that variable
is set. While it starts, the worker writes its progress as JSON to ``--status-file``
(``{"phase": "loading"|"ready"|"failed", "message", "port", "pid"}``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from ..testhooks import hold
from .engine_factory import make_engine
from .schema import OpenAIError
from .worker_app import create_worker_app
from .worker_state import WorkerState


def _write_status(path: Path | None, **fields: Any) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Load the models named in ``--spec`` and serve until stopped.

    The spec is JSON: ``{"base": {"name", "dir", "instructions"}, "adapters":
    [{"name", "path", "instructions"}], "engine", "maxContext", "maxAdapters",
    "maxRank", "mergeAdapters", "precision", "host", "port"}`` (port 0 picks a free one; no host:
    ``AKKA_NODE_IP``, which a cluster's actor sets to its node's address, else
    ``127.0.0.1``). The status file's ``host`` and ``port`` say where it listens.
    """
    ap = argparse.ArgumentParser(prog="python -m akka_optimize.serving.worker")
    ap.add_argument("--spec", required=True, type=Path)
    ap.add_argument("--status-file", type=Path, default=None)
    args = ap.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    status = args.status_file

    def say(msg: str) -> None:
        _write_status(status, phase="loading", message=msg)
        hold(f"starting: {msg}")  # tests only: stop at a known start milestone

    try:
        import uvicorn

        engine = make_engine(
            spec.get("engine", "transformers"),
            Path(spec["base"]["dir"]),
            max_context=int(spec.get("maxContext", 8192)),
            max_adapters=int(spec.get("maxAdapters", 8)),
            max_rank=int(spec.get("maxRank", 64)),
            merge_adapters=bool(spec.get("mergeAdapters", True)),
            precision=str(spec.get("precision", "auto")),
            progress=say,
        )
        state = WorkerState(
            engine,
            spec["base"]["name"],
            max_rank=int(spec.get("maxRank", 64)),
            token=os.environ.get("AKKA_SERVING_TOKEN") or None,
        )
        state.instructions[state.base_name] = spec["base"].get("instructions")
        for a in spec.get("adapters", []):
            say(f"loading the adapter {a['name']}")
            state.add_adapter(a["name"], Path(a["path"]), a.get("instructions"))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        host = spec.get("host") or os.environ.get("AKKA_NODE_IP") or "127.0.0.1"
        sock.bind((host, int(spec.get("port", 0))))
        sock.listen(64)
        port = sock.getsockname()[1]
        app = create_worker_app(state)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    except Exception as exc:
        msg = exc.message if isinstance(exc, OpenAIError) else f"{type(exc).__name__}: {exc}"
        _write_status(status, phase="failed", message=msg)
        print(f"endpoint worker failed to start: {msg}", file=sys.stderr)
        return 1
    _write_status(status, phase="ready", message=f"ready on port {port}", port=port, host=host)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
