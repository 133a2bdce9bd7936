"""``minifield-worker supervise``: claim recipe runs from the service and train them
(seeds/003: "the supervisor advertises its accepted computations when claiming work").

The supervisor long-polls ``POST /v1/training/recipes/claim`` with the computations it has
installed (``schema_version``, ``model.implementation``, computation version; all of
:data:`registry.STRATEGIES`, or those ``--accept`` names). The service answers the oldest
queued recipe run it can do, now ``RUNNING`` with an attempt and that attempt's token
(:mod:`akka_optimize.core.recipes.runs`). The supervisor writes the recipe into
``OUTPUT/RUN/recipe.json`` and trains it with the direct worker
(:class:`akka_optimize.minifield.train.Worker`, outputs in ``OUTPUT/RUN/out``), posting
each event through the route every run's worker uses (:class:`akka_optimize.
worker_events.EventClient`, which retries and follows a moved service):

- ``start`` → ``phase`` (``RUNNING``, ``totalSteps``);
- ``step`` → ``metrics`` (``loss``, ``learningRate``, ``gradNorm``, ``updateNorm``,
  ``supervisedTokens``, ``totalTokens``, ``stepTimeSeconds``), so ``training runs
  metrics`` shows the loss per update;
- ``checkpoint`` → ``checkpoint`` (``step``, ``path``);
- ``end`` → ``completed`` with the final folder and, for QAT, the export;
- a refusal or error → ``failed`` with its sentence;
- and from a thread, ``heartbeat`` every quarter of the claim's ``heartbeatSeconds``
  (:class:`Heartbeat`), so the service tells a busy worker from a dead one.

The data are the recipe's own absolute ``model.path`` and ``data.path`` (a filesystem the
service and the worker share). The worker recomputes the computation identity from the
files; one that differs from the submitted identity fails the run naming the changed
settings (the files changed since submission). A cancel (or pause) asked in the answer to
an event stops the run at the next update boundary (``cancelled`` / ``paused``); a paused
run resumed later continues from this machine's latest checkpoint of it, with a new
attempt identity (``RUN-ATTEMPT``), when the same output folder holds one.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..worker_events import Attempt, EventClient, failure_sentence
from .identity import changed_settings
from .registry import STRATEGIES, RecipeError

Say = Callable[[str], None]
CLAIM_WAIT_S = 30
"""Seconds one claim request waits at the service for work (its long poll)."""

METRIC_KEYS = {
    "loss": "loss",
    "learning_rate": "learningRate",
    "grad_norm": "gradNorm",
    "update_norm": "updateNorm",
    "supervised_tokens": "supervisedTokens",
    "input_tokens": "totalTokens",
    "step_time_s": "stepTimeSeconds",
}
"""The direct worker's ``step`` fields, by the name ``training runs metrics`` shows."""


class Stopped(Exception):
    """The service asked the run to stop (``cancel`` or ``pause``) in an event's answer."""

    def __init__(self, control: str) -> None:
        super().__init__(control)
        self.control = control


def advertised(accept: list[str] | None = None) -> list[dict[str, str]]:
    """The computations this worker offers: every installed strategy's
    (``schema_version``, implementation, computation), or only the schema versions or
    strategy names in ``accept``.

    Raises:
        RecipeError: (``--accept``) a value no installed strategy has.
    """
    wanted = set(accept or [])
    known = {s.schema_version for s in STRATEGIES} | {s.name for s in STRATEGIES}
    if wanted - known:
        raise RecipeError(
            f"--accept {sorted(wanted - known)[0]!r} is no installed strategy; installed: "
            f"{', '.join(sorted(known))}.",
            field="--accept",
        )
    return [
        {"schema_version": s.schema_version, "implementation": impl, "computation": s.computation}
        for s in STRATEGIES
        for impl in s.implementations
        if not wanted or s.schema_version in wanted or s.name in wanted
    ]


def claim(url: str, token: str, accepts: list[dict[str, str]], wait: float) -> dict | None:
    """One claim request: the claimed job, or None when none came within ``wait`` seconds.

    Raises:
        RecipeError: the service refused the claim (its sentence); httpx.HTTPError: no answer.
    """
    r = httpx.post(
        url.rstrip("/") + "/v1/training/recipes/claim",
        json={"accepts": accepts, "wait": wait, "worker": "minifield-worker supervise"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=wait + 60,
    )
    if r.status_code != 200:
        try:
            err = r.json().get("error") or {}
        except ValueError:
            err = {}
        raise RecipeError(
            f"The service refused the claim (HTTP {r.status_code}): "
            f"{err.get('message') or r.text[:300]}",
            field=err.get("field") or "--url",
        )
    return r.json()["job"]


def event_line(event: dict[str, Any]) -> str:
    """One line of text for a direct worker event (``start``, ``step``, ``checkpoint``,
    ``end``), as ``minifield-worker run`` prints it."""
    kind = event.get("event")
    if kind == "step":
        return (
            f"step {event['step']}: loss {event['loss']:.4f}  grad_norm {event['grad_norm']:.4f}  "
            f"update_norm {event['update_norm']:.3g}  tokens {event['input_tokens']} "
            f"(supervised {event['supervised_tokens']})  {event['step_time_s']:.2f} s"
        )
    if kind == "start":
        return (
            f"{event['strategy']} {event['computation']} ({event['implementation']}): "
            f"identity {event['computation_identity'][:16]}…, updates {event['step'] + 1}–{event['updates']}"
        )
    if kind == "checkpoint":
        return f"checkpoint after update {event['step']}: {event['path']}"
    return f"done: {event.get('final')}" + (
        f", export {event['export']}" if "export" in event else ""
    )


class Forward:
    """The direct worker's event callback in supervised mode: prints each event's line,
    posts it as a service event, keeps the losses, and stops at an update boundary when
    the service asks (:class:`Stopped`)."""

    def __init__(self, events: EventClient, say: Say) -> None:
        self.events = events
        self.say = say
        self.losses: list[float] = []

    def __call__(self, ev: dict[str, Any]) -> None:
        self.say(event_line(ev))
        kind = ev.get("event")
        if kind == "start":
            detail = f"training {ev['strategy']} {ev['computation']} on {ev['device']}"
            phase = {"type": "phase", "phase": "RUNNING", "detail": detail}
            self.events.send(phase | {"totalSteps": ev["updates"]})
        elif kind == "step":
            self.losses.append(float(ev["loss"]))
            values = {name: ev[key] for key, name in METRIC_KEYS.items() if key in ev}
            self.events.send({"type": "metrics", "step": ev["step"], **values})
        elif kind == "checkpoint":
            self.events.send({"type": "checkpoint", "step": ev["step"], "path": ev["path"]})
        if kind in ("step", "checkpoint") and self.events.control in ("cancel", "pause"):
            raise Stopped(self.events.control)


class Heartbeat:
    """A daemon thread posting ``{"type": "heartbeat"}`` every ``interval_s`` seconds
    through ``events`` until :meth:`stop` (the service fails a claimed run that sends no
    event for ``service.recipeHeartbeatSeconds``: :func:`akka_optimize.core.recipes.runs.
    reap_silent`). A failed post is left to the next beat; the answer's control request
    (``cancel``/``pause``) reaches :class:`Forward` through ``events.control``."""

    def __init__(self, events: EventClient, interval_s: float) -> None:
        self.events = events
        self.interval_s = interval_s
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.events.send({"type": "heartbeat"})
                self.beats += 1
            except Exception:  # the service is away: the events of the run say so
                continue

    def stop(self) -> None:
        """Stop beating; returns once the thread has ended (a beat in flight finishes)."""
        self._stop.set()
        self._thread.join(timeout=120)


def _outcome(worker: Any, job: dict[str, Any], forward: Forward) -> dict[str, Any]:
    """Train the claimed recipe; returns the final service event.

    Raises:
        RecipeError: the identity computed here differs from the submitted one (naming the
            changed settings), or the direct worker refuses the recipe.
        Stopped: the service asked the run to stop.
    """
    from . import checkpoint  # lazy: safetensors

    want = job["computation"]["computationIdentity"]
    if worker.identity != want:
        changed = changed_settings(job["settings"], worker.settings)
        raise RecipeError(
            f"The recipe's computation identity here is {worker.identity[:16]}…, not the "
            f"submitted {want[:16]}…: {', '.join(changed) or 'its settings'} changed since it "
            "was submitted; submit it again as a new run.",
            field="recipe",
        )
    resume = checkpoint.latest(worker.out) is not None
    end = worker.run(resume=resume, attempt=f"{job['run']}-{job['attempt']}")
    result: dict[str, Any] = {"final": end["final"], "worker": "minifield-worker supervise"}
    if "export" in end:
        result["export"] = end["export"]
    if forward.losses:
        result["finalLoss"] = forward.losses[-1]
        result["meanLoss"] = sum(forward.losses) / len(forward.losses)
    return {"type": "completed", "result": result}


def run_job(url: str, job: dict[str, Any], output: Path, device: str, say: Say) -> str:
    """Train one claimed job and report it; returns the state it ended in
    (``SUCCEEDED``, ``FAILED``, ``CANCELLED`` or ``PAUSED``)."""
    from .train import Worker  # lazy: safetensors

    spec = Attempt(job["run"], int(job["attempt"]), url, job["token"])
    events = EventClient(spec)
    folder = output / job["run"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.json").write_text(json.dumps(job["recipe"], indent=1))
    say(f"claimed run {job['run']} attempt {job['attempt']} ({job['project']})")
    beat = Heartbeat(events, float(job.get("heartbeatSeconds") or 300) / 4).start()
    try:
        forward = Forward(events, say)
        worker = Worker(folder / "recipe.json", folder / "out", forward, device)
        final = _outcome(worker, job, forward)
    except Stopped as stop:
        final = {"type": "cancelled" if stop.control == "cancel" else "paused"}
    except Exception as exc:  # every failure reaches the service as a sentence
        final = {
            "type": "failed",
            "reason": failure_sentence(exc),
            "detail": traceback.format_exc()[-20000:],
        }
    finally:
        beat.stop()
    events.send(final)
    state = {"completed": "SUCCEEDED", "failed": "FAILED", "cancelled": "CANCELLED"}
    ended = state.get(final["type"], "PAUSED")
    say(f"run {job['run']} {ended}" + (f": {final['reason']}" if ended == "FAILED" else ""))
    return ended


def supervise(
    url: str,
    token: str,
    output: Path,
    *,
    once: bool = False,
    wait: float = CLAIM_WAIT_S,
    accept: list[str] | None = None,
    device: str = "auto",
    say: Say = print,
) -> int:
    """Claim and train recipe runs until stopped (or one claim with ``once``).

    Returns:
        The exit status: 0, or with ``once`` 1 when the claimed run did not succeed.

    Raises:
        RecipeError: a bad ``--accept``, or the service refused the claim.
    """
    accepts = advertised(accept)
    offered = ", ".join(sorted({f"{a['computation']} ({a['implementation']})" for a in accepts}))
    say(f"supervising {url}: accepting {offered}")
    while True:
        try:
            job = claim(url, token, accepts, wait)
        except httpx.HTTPError as exc:
            if once:
                raise RecipeError(f"--url {url}: no answer ({exc}).", field="--url") from None
            say(f"no answer from {url} ({type(exc).__name__}); trying again")
            time.sleep(5)
            continue
        if job is None:
            if once:
                say(f"no recipe job to claim within {wait:g} s")
                return 0
            continue
        ended = run_job(url, job, output, device, say)
        if once:
            return 0 if ended == "SUCCEEDED" else 1
