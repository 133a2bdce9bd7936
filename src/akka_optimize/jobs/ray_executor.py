"""The Ray executor: each attempt's worker placed on a Ray cluster (issue 25 item 1).

With ``executor: {kind: ray, address: …}`` in the deployment file, the scheduler hands each
job attempt (supervised and reinforcement attempts, evaluations, curations) to
:class:`RayExecutor` instead of :class:`~akka_optimize.jobs.executor.LocalExecutor`. It
creates one *detached, named* actor per attempt (``akka-job-<id>`` in the deployment's
namespace) that reserves the attempt's devices as Ray resources and runs the very command
the local executor runs (``python -m akka_optimize.jobs.worker SPEC.json``) with the same
environment (the job spec holds the callback address and the attempt's token), writing
the same log file. The executor's ``int`` handle is the actor's id number:

- ``alive`` asks the actor whether its worker still runs; an actor that is gone (killed,
  or its node lost) is a worker that has ended;
- ``exit_code`` is the worker's return code as the actor saw it (negative: the signal);
  ``None`` when the actor itself is gone, which recovery reports as a worker that ended
  without saying why, naming ``runs resume``;
- ``kill`` kills the worker's process group, then the actor;
- ``collect`` releases the actors of ended workers it launched or was asked about (their
  exit codes stay known), which frees their Ray resources.

Because the actors are named and detached, a restarted service finds the workers an
earlier service process launched (:mod:`akka_optimize.jobs.recovery` asks ``alive`` by the
handle stored with the attempt). Ray is imported only when this executor is built.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

from ..deployment import ExecutorSettings

ACTOR_PREFIX = "akka-job-"
CALL_TIMEOUT_S = 30.0
"""How long one question to a job's actor may take before the cluster counts as not
answering (the worker is then taken to be alive: nothing is concluded from silence)."""


def _die_with_parent() -> None:
    """In the worker, before it runs: SIGKILL when the actor's process dies (a killed actor
    or a lost node leaves no worker training on for an attempt that has ended)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _actor_class() -> Any:
    import ray

    @ray.remote(max_concurrency=4)
    class JobWorker:
        """Runs one worker subprocess on its node and answers for it."""

        def __init__(self) -> None:
            self.proc: Any = None

        def start(self, cmd: list[str], env: dict[str, str], log_path: str) -> int:
            import subprocess

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


class RayExecutor:
    """Starts and watches job workers as Ray actors (see the module docstring).

    Args:
        settings: the deployment's ``executor`` section (``kind: ray``, ``address``,
            ``namespace``, ``resources``).

    Raises:
        InvalidRequest: Ray is not installed.
    """

    name = "ray"

    def __init__(self, settings: ExecutorSettings) -> None:
        try:
            import ray
        except ImportError as exc:
            from ..errors import InvalidRequest

            raise InvalidRequest(
                "executor.kind is ray but Ray is not installed: pip install 'akka-optimize[ray]'",
                field="executor.kind",
            ) from exc
        self.settings = settings
        self._ray = ray
        if not ray.is_initialized():
            ray.init(
                address=settings.address,
                namespace=settings.namespace,
                log_to_driver=False,
                configure_logging=False,
            )
        self._cls = _actor_class()
        self._codes: dict[int, int | None] = {}
        self._seen: set[int] = set()
        """Handles launched here or asked about (a restarted service's recovered ones)."""

    # ----------------------------------------------------------------- helpers
    def _name(self, handle: int) -> str:
        return f"{ACTOR_PREFIX}{handle}"

    def _actor(self, handle: int) -> Any | None:
        try:
            return self._ray.get_actor(self._name(handle), namespace=self.settings.namespace)
        except ValueError:  # no such actor: killed, collected, or its node is gone
            return None

    def _resources(self, device: str) -> dict[str, Any]:
        wanted = dict(self.settings.resources.get(device) or {})
        if not wanted:
            wanted = {"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}
        options: dict[str, Any] = {}
        custom = {}
        for key, amount in wanted.items():
            if key in ("num_cpus", "num_gpus", "memory"):
                options[key] = amount
            else:
                custom[key] = amount
        if custom:
            options["resources"] = custom
        options.setdefault("num_cpus", 0)
        return options

    # ------------------------------------------------------------ the protocol
    def launch(self, spec_path: Path, log_path: Path, device: str) -> int:
        """Create the attempt's actor and start the worker in it; returns the handle."""
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if device != "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray sets the reserved GPUs
        handle = random.randrange(1 << 20, 1 << 31)
        while handle in self._codes or self._actor(handle) is not None:
            handle = random.randrange(1 << 20, 1 << 31)
        actor = self._cls.options(
            name=self._name(handle),
            namespace=self.settings.namespace,
            lifetime="detached",
            **self._resources(device),
        ).remote()
        cmd = [sys.executable, "-m", "akka_optimize.jobs.worker", str(spec_path)]
        self._ray.get(actor.start.remote(cmd, env, str(log_path)), timeout=CALL_TIMEOUT_S * 4)
        self._seen.add(handle)
        return handle

    def _poll(self, handle: int) -> tuple[bool, int | None]:
        """``(ended, exit code)`` of the worker ``handle``."""
        if handle in self._codes:
            return True, self._codes[handle]
        actor = self._actor(handle)
        if actor is None:
            return True, None
        try:
            code = self._ray.get(actor.poll.remote(), timeout=CALL_TIMEOUT_S)
        except self._ray.exceptions.RayActorError:
            return True, None  # the actor died: its worker with it
        except self._ray.exceptions.GetTimeoutError:
            return False, None  # the cluster did not answer: conclude nothing
        return code is not None, code

    def alive(self, pid: int) -> bool:
        self._seen.add(pid)
        return not self._poll(pid)[0]

    def exit_code(self, pid: int) -> int | None:
        ended, code = self._poll(pid)
        return code if ended else None

    def kill(self, pid: int) -> None:
        actor = self._actor(pid)
        if actor is None:
            return
        try:
            self._ray.get(actor.kill.remote(), timeout=CALL_TIMEOUT_S)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
            pass
        self._ray.kill(actor)

    def collect(self) -> None:
        """Release the actors whose workers have ended (their exit codes stay known)."""
        for handle in sorted(self._seen - set(self._codes)):
            ended, code = self._poll(handle)
            if ended:
                self._codes[handle] = code
                actor = self._actor(handle)
                if actor is not None:
                    self._ray.kill(actor)
