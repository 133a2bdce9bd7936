"""The Ray executor: each attempt's worker placed on a Ray cluster (issue 25 items 1–2).

With ``executor: {kind: ray, address: …}`` in the deployment file, the scheduler hands each
job attempt (supervised and reinforcement attempts, evaluations, curations) to
:class:`RayExecutor` instead of :class:`~akka_optimize.jobs.executor.LocalExecutor`. Endpoints' serving workers go the same way
(:meth:`RayExecutor.start`, used by the endpoint manager): they listen on the node's
address, which the actor passes as ``AKKA_NODE_IP``. Each
attempt gets a *detached, named* actor (``akka-job-<handle>`` in the deployment's namespace)
that reserves the attempt's devices as Ray resources and runs the very command the local
executor runs (``python -m akka_optimize.jobs.worker SPEC.json``) with the same environment
(the job spec holds the callback address and the attempt's token), writing the same log.
The executor's ``int`` handle names the actor, so a restarted service finds the workers an
earlier service process launched.

The service never imports Ray: a Ray driver whose cluster stops answering blocks and then
ends its own process. All Ray calls go through one bridge process
(:mod:`akka_optimize.jobs.ray_bridge`), each answer awaited at most ``CALL_TIMEOUT_S``
(a launch) or ``executor.outageSeconds`` if shorter (every other call); a bridge that does
not answer is killed and started again on a later call, its connect bounded by what is left
of the outage. The outage counts from when the first unanswered call was sent.

- ``alive`` asks whether the actor's worker still runs. An actor that is gone (killed, or
  its node lost) is a worker that has ended, with no exit code: recovery fails the run with
  a sentence naming ``runs resume``.
- When the cluster does not answer, the worker counts as alive, so the run keeps its phase
  (seeds/001: a run no longer fails because the cluster does not answer for a few
  minutes), for up to ``executor.outageSeconds`` (900 s). Past that, the attempt ends
  with :data:`CLUSTER_UNREACHABLE_EXIT` and the run's failure says the cluster could not be
  reached (:func:`cluster_unreachable_sentence`), not an exit code.
- ``kill`` kills the worker's process group, then the actor; ``collect`` releases the
  actors of ended workers (their exit codes stay known), which frees their resources.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..deployment import ExecutorSettings
from .spec import worker_command

CALL_TIMEOUT_S = 20.0
"""How long one answer from the bridge may take before the cluster counts as not answering."""
CONNECT_TIMEOUT_S = 90.0
"""How long the bridge may take to connect (``ray.init``) and say ``ready``."""
RETRY_AFTER_S = 5.0
"""While the cluster does not answer, the bridge is started again at most this often."""
CLUSTER_UNREACHABLE_EXIT = 4
"""The exit code recorded for an attempt whose cluster did not answer for
``executor.outageSeconds``."""


def cluster_unreachable_sentence(address: str, seconds: float) -> str:
    """The failure reason of a run whose Ray cluster stopped answering (issue 25 item 2)."""
    return (
        f"The Ray cluster at {address} could not be reached for {seconds:g} s "
        "(executor.outageSeconds), so the attempt was ended; resume the run with "
        "`training runs resume` once the cluster answers."
    )


class ClusterUnreachable(Exception):
    """The bridge did not answer (or could not connect) in time."""


class _BridgeProcess:
    """The bridge subprocess with a reader thread, so every answer has a deadline."""

    def __init__(self, settings: ExecutorSettings, connect_timeout: float) -> None:
        arg = json.dumps(
            {
                "address": settings.address,
                "namespace": settings.namespace,
                "resources": settings.resources,
                "node_ip_address": settings.nodeIpAddress,
            }
        )
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "akka_optimize.jobs.ray_bridge", arg],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name="ray-bridge-reader", daemon=True).start()
        if self._next(connect_timeout) != "ready":
            self.stop()
            raise ClusterUnreachable(f"the bridge could not connect to {settings.address}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def _next(self, timeout: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ClusterUnreachable("the bridge has exited") from exc
        line = self._next(timeout)
        if line is None:
            raise ClusterUnreachable(f"no answer to {request['op']} in {timeout:g} s")
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class RayExecutor:
    """Starts and watches job workers as Ray actors (see the module docstring).

    Args:
        settings: the deployment's ``executor`` section (``kind: ray``, ``address``,
            ``namespace``, ``resources``, ``outageSeconds``).
    """

    name = "ray"

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self._bridge: _BridgeProcess | None = None
        self._failed_at = 0.0
        self._lock = threading.Lock()
        self._codes: dict[int, int | None] = {}
        self._seen: set[int] = set()
        """Handles launched here or asked about (a restarted service's recovered ones)."""
        self.unreachable_since: float | None = None
        """``time.monotonic()`` of the first unanswered call of the current outage."""

    def _wait(self, usual: float) -> float:
        """How long the next connect or answer may take, in seconds: ``usual``, but during an
        outage no longer than what is left of ``executor.outageSeconds`` (at least
        ``RETRY_AFTER_S``), so an outage ends when it is due rather than one connect later."""
        if self.unreachable_since is None:
            return usual
        left = self.settings.outageSeconds - (time.monotonic() - self.unreachable_since)
        return min(usual, max(RETRY_AFTER_S, left))

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        """One request to the bridge (started on demand). Raises ClusterUnreachable."""
        with self._lock:
            sent = time.monotonic()
            try:
                if self._bridge is None:
                    if time.monotonic() - self._failed_at < RETRY_AFTER_S:
                        raise ClusterUnreachable("the cluster did not answer moments ago")
                    self._bridge = _BridgeProcess(self.settings, self._wait(CONNECT_TIMEOUT_S))
                usual = CALL_TIMEOUT_S
                if op != "launch":  # a launch starts a process; the rest answer at once
                    usual = min(usual, self.settings.outageSeconds)
                answer = self._bridge.call({"op": op, **args}, self._wait(usual))
                if answer.get("unreachable"):
                    raise ClusterUnreachable(str(answer.get("error")))
            except ClusterUnreachable:
                if self._bridge is not None:
                    self._bridge.stop()
                    self._bridge = None
                self._failed_at = time.monotonic()
                if self.unreachable_since is None:
                    self.unreachable_since = sent  # unanswered since it was sent
                raise
            self.unreachable_since = None
        if not answer.get("ok"):
            raise RuntimeError(f"Ray refused {op}: {answer.get('error')}")
        return answer

    # ------------------------------------------------------------ the protocol
    def launch(self, spec_path: Path, log_path: Path, device: str) -> int:
        """Create the attempt's actor and start the worker in it; returns the handle.

        Raises:
            ClusterUnreachable: the cluster did not answer (the attempt is not started).
        """
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if device != "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray sets the reserved GPUs
        cmd = worker_command(spec_path)
        return self.start(cmd, env, log_path, device)

    def start(self, cmd: list[str], env: dict[str, str], log_path: Path, device: str) -> int:
        """Create an actor that runs ``cmd`` with ``env`` on a node; returns the handle.

        The command learns the node's address from ``AKKA_NODE_IP`` (an endpoint's serving
        worker listens there). Raises:
            ClusterUnreachable: the cluster did not answer (nothing is started).
        """
        handle = random.randrange(1 << 20, 1 << 31)
        self._call("launch", handle=handle, cmd=cmd, env=env, log=str(log_path), device=device)
        self._seen.add(handle)
        return handle

    def _poll(self, handle: int) -> tuple[bool, int | None]:
        """``(ended, exit code)`` of the worker ``handle``."""
        if handle in self._codes:
            return True, self._codes[handle]
        try:
            answer = self._call("poll", handle=handle)
        except ClusterUnreachable:
            since = self.unreachable_since or time.monotonic()
            if time.monotonic() - since >= self.settings.outageSeconds:
                return True, CLUSTER_UNREACHABLE_EXIT
            return False, None  # keep the phase: the cluster may answer again
        return bool(answer["ended"]), answer["code"]

    def alive(self, pid: int) -> bool:
        self._seen.add(pid)
        return not self._poll(pid)[0]

    def exit_code(self, pid: int) -> int | None:
        ended, code = self._poll(pid)
        return code if ended else None

    def ended_sentence(self, code: int | None) -> str | None:
        """The failure reason recovery gives for exit ``code``, where this executor has one."""
        if code == CLUSTER_UNREACHABLE_EXIT:
            return cluster_unreachable_sentence(
                str(self.settings.address), self.settings.outageSeconds
            )
        return None

    def kill(self, pid: int) -> None:
        try:
            self._call("kill", handle=pid)
        except ClusterUnreachable:
            pass  # an unreachable cluster's workers end with it; recovery says so

    def collect(self) -> None:
        """Release the actors whose workers have ended (their exit codes stay known)."""
        for handle in sorted(self._seen - set(self._codes)):
            ended, code = self._poll(handle)
            if not ended:
                continue
            self._codes[handle] = code
            try:
                self._call("release", handle=handle)
            except ClusterUnreachable:
                pass
