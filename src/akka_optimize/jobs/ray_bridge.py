"""The Ray bridge: the one process of the service that talks to the Ray cluster.

Run as ``python -m akka_optimize.jobs.ray_bridge SETTINGS_JSON`` by
:class:`akka_optimize.jobs.ray_executor.RayExecutor`. A Ray driver whose cluster head stops
answering blocks in its calls and, after about a minute, ends its own process; so the
service never imports Ray itself. The bridge connects (``ray.init``), prints ``ready``, then
answers one JSON request per line on standard input with one JSON line on standard output:

- ``{"op": "launch", "handle", "cmd", "env", "log", "device"}`` → ``{"ok": true}``: a
  detached actor ``akka-job-<handle>`` in the namespace, reserving the device's resources,
  starts the worker command with ``AKKA_NODE_IP`` set to the node's address (the worker dies with the actor: ``PR_SET_PDEATHSIG``);
- ``{"op": "poll", "handle"}`` → ``{"ok": true, "ended": bool, "code": int | null}``
  (``ended`` with ``code`` null when the actor is gone: killed, or its node lost);
- ``{"op": "kill", "handle"}`` and ``{"op": "release", "handle"}`` → ``{"ok": true}``;
- a head that does not answer when an actor looks gone → ``{"ok": false, "unreachable":
  true, "error": "…"}`` (a stopped head makes every actor look dead: that is an outage);
- anything else that fails → ``{"ok": false, "error": "…"}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ACTOR_PREFIX = "akka-job-"


class Unreachable(Exception):
    """The cluster's head did not answer (answered ``{"ok": false, "unreachable": true}``)."""


def _die_with_parent() -> None:
    """In the worker, before it runs: SIGKILL when the actor's process dies (a killed actor
    or a lost node leaves no worker training on for an attempt that has ended)."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)


def _node_address(ray: Any) -> str:
    """The address the cluster knows this actor's node by (its ``NodeManagerAddress``, as
    ``--node-ip-address`` set it), not a guess from the machine's interfaces."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return str(node["NodeManagerAddress"])
    return ray.util.get_node_ip_address()


def _actor_class(ray: Any) -> Any:
    @ray.remote(max_concurrency=4)
    class JobWorker:
        """Runs one worker subprocess on its node and answers for it."""

        def __init__(self) -> None:
            self.proc: Any = None

        def start(self, cmd: list[str], env: dict[str, str], log_path: str) -> int:
            import subprocess

            env = {**env, "AKKA_NODE_IP": _node_address(ray)}
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            return int(self.proc.pid)

        def poll(self) -> int | None:
            return None if self.proc is None else self.proc.poll()

        def kill(self) -> None:
            import signal

            if self.proc is not None and self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.proc.wait()

    return JobWorker


def options(resources: dict[str, float], device: str) -> dict[str, Any]:
    """Ray actor options reserving ``resources`` (one CPU for ``cpu``, one GPU for ``cuda``
    when empty); names other than ``num_cpus``/``num_gpus``/``memory`` are custom resources."""
    wanted = dict(resources) or ({"num_gpus": 1} if device == "cuda" else {"num_cpus": 1})
    out: dict[str, Any] = {}
    custom = {k: v for k, v in wanted.items() if k not in ("num_cpus", "num_gpus", "memory")}
    out.update({k: v for k, v in wanted.items() if k not in custom})
    if custom:
        out["resources"] = custom
    out.setdefault("num_cpus", 0)
    return out


class Bridge:
    """The requests of the module docstring, against one connected Ray cluster."""

    def __init__(self, settings: dict[str, Any]) -> None:
        import ray

        self.ray = ray
        self.namespace = settings["namespace"]
        self.resources = settings.get("resources") or {}
        extra = {}
        if settings.get("node_ip_address"):
            extra["_node_ip_address"] = settings["node_ip_address"]
        ray.init(
            address=settings["address"],
            namespace=self.namespace,
            log_to_driver=False,
            configure_logging=False,
            **extra,
        )
        self.cls = _actor_class(ray)

    def _actor(self, handle: int) -> Any | None:
        try:
            return self.ray.get_actor(f"{ACTOR_PREFIX}{handle}", namespace=self.namespace)
        except ValueError:
            return None

    def launch(self, handle: int, cmd: list[str], env: dict, log: str, device: str) -> dict:
        actor = self.cls.options(
            name=f"{ACTOR_PREFIX}{handle}",
            namespace=self.namespace,
            lifetime="detached",
            **options(self.resources.get(device) or {}, device),
        ).remote()
        self.ray.get(actor.start.remote(cmd, env, log))
        return {}

    def poll(self, handle: int) -> dict:
        actor = self._actor(handle)
        if actor is not None:
            try:
                code = self.ray.get(actor.poll.remote())
                return {"ended": code is not None, "code": code}
            except self.ray.exceptions.RayActorError:
                pass
        # The actor is gone. Only a cluster that answers can say so: a stopped head also
        # makes actors look dead, and that is an outage, not a lost worker.
        self.cluster_answers()
        return {"ended": True, "code": None}

    def cluster_answers(self) -> dict:
        """Ask the cluster's head for its nodes. Raises Unreachable when it does not answer."""
        try:
            alive = [n for n in self.ray.nodes() if n.get("Alive")]
        except Exception as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
        if not alive:
            raise Unreachable("the cluster has no live node")
        return {}

    def kill(self, handle: int) -> dict:
        actor = self._actor(handle)
        if actor is not None:
            try:
                self.ray.get(actor.kill.remote())
            except self.ray.exceptions.RayActorError:
                pass
            self.ray.kill(actor)
        return {}

    def release(self, handle: int) -> dict:
        actor = self._actor(handle)
        if actor is not None:
            self.ray.kill(actor)
        return {}


def main() -> None:
    """Connect, say ``ready``, then answer requests until standard input closes."""
    bridge = Bridge(json.loads(sys.argv[1]))
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol stream
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        try:
            answer = {"ok": True, **getattr(bridge, op)(**req)}
        except Unreachable as exc:
            answer = {"ok": False, "unreachable": True, "error": str(exc)}
        except Exception as exc:  # answered, not fatal: the service decides
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
