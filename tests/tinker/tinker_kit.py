"""Shared by the Tinker SDK tests: the tiny base model, ``tml-`` keys, and a live service
with projects ``demo`` and ``other`` and the tiny model selected."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from helpers import BIN, LiveService, base_env, free_port

TINY = "akka-optimize/tiny-smollm2"
PROJECTS = ("demo", "other")


def tinker_key(svc: LiveService, project: str) -> str:
    """A new ``tml-`` key acting in ``project`` (``server token create --tinker``)."""
    args = [str(BIN / "akka-optimize"), "server", "token", "create", "--project", project]
    env = base_env(svc.home, svc.config_dir)
    out = subprocess.run(args + ["--tinker"], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def created(made: Any) -> Any:
    """The client a 0.38 ``create_*`` call returns (a future of it, or it)."""
    return made.result() if hasattr(made, "result") else made


def write_cpu_devices(home: Path, devices: int) -> None:
    """Write ``home/deployment.yaml``: the default deployment with ``devices`` CPU devices
    (one Tinker client, training or sampling, holds one until its session ends)."""
    import yaml

    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    for profile in raw["deviceProfiles"]:
        if profile["name"] == "cpu":
            profile["devicesPerNode"] = devices
    home.mkdir(parents=True, exist_ok=True)
    (home / "deployment.yaml").write_text(yaml.safe_dump(raw))


def answer_datum(prompt: list[int], answer: list[int]) -> Any:
    """A shifted datum supervising ``answer`` after ``prompt`` (the prompt's targets have
    weight 0), as tinker-cookbook builds one."""
    from tinker import types

    ids = prompt + answer
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": weights},
    )


@contextmanager
def tinker_service(folder: Path, devices: int = 1) -> Iterator[tuple[LiveService, dict[str, str]]]:
    """A live service homed in ``folder`` with :data:`PROJECTS` created, :data:`TINY`
    selected and READY, ``devices`` CPU devices and a key per project; stopped on exit."""
    if devices != 1:
        write_cpu_devices(folder / "home", devices)
    svc = LiveService(home=folder / "home", config_dir=folder / "config", port=free_port())
    svc.start()
    try:
        for name in PROJECTS:
            svc.cli("training", "projects", "create", name, check=True)
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        yield svc, {p: tinker_key(svc, p) for p in PROJECTS}
    finally:
        svc.stop()
