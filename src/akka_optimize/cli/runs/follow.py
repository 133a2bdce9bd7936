"""Following a run from the CLI: one progress line per change until it ends (``--wait``).

Used by ``training runs start --wait``, ``resume --wait``, ``sweep --wait`` and
``training runs wait``; it imports none of those command modules.
"""

from __future__ import annotations

from typing import Any

from ..client import Client
from ..output import wait_for

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def progress_line(run: dict[str, Any]) -> str:
    """One line of live progress: state, step, loss, phase or queue reason."""
    r = run["results"]
    parts = [f"run {run['id'][:8]} {run['state']}"]
    if run["state"] == "QUEUED" and run.get("queueReason"):
        parts.append(f"({run['queueReason']})")
    elif run.get("phase"):
        parts.append(f"({run['phase']})")
    if r.get("totalSteps") or r.get("step"):
        parts.append(f"step {r.get('step') or 0}/{r.get('totalSteps') or '?'}")
    if run["state"] in TERMINAL:
        parts.append(f"final step {r.get('step')}")
    return " ".join(parts)


def wait_for_run(client: Client, run_id: str, timeout: float | None = None) -> dict[str, Any]:
    """Follow a run until it ends; returns its final view. Milestones per wait_for."""
    box: dict[str, Any] = {}

    def poll() -> tuple[bool, str]:
        box["run"] = client.get(f"/v1/training/runs/{run_id}")
        return box["run"]["state"] in TERMINAL + ("PAUSED",), progress_line(box["run"])

    wait_for(poll, interval=1.0, timeout=timeout)
    return box["run"]


def follow_run(client: Client, run_id: str, output: str) -> dict[str, Any]:
    """``--wait``: progress on stderr when the answer goes to stdout as JSON."""
    import contextlib
    import sys

    if output == "json":
        with contextlib.redirect_stdout(sys.stderr):
            return wait_for_run(client, run_id)
    return wait_for_run(client, run_id)
