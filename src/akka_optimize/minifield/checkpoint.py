"""Checkpoints and their recovery (the page's "checkpoint recovery", specified here).

A checkpoint is the folder ``OUT/checkpoints/step-NNNNNNNN/`` (8-digit update count)::

    model.safetensors   FP32 master weights (tied tensors stored once)
    optimizer.pt        AdamW state (FP32) and the torch RNG state
    state.json          step, attempt identities, computation settings and identity,
                        schema_version, model.implementation
    manifest.json       {"format": "minifield.checkpoint.v1", "step",
                         "computation_identity", "schema_version", "implementation",
                         "files": {name: sha256}}

It is written to a hidden temporary folder and renamed into place, so a crash leaves no
half checkpoint under its final name. Recovery (:func:`verify`) reads the manifest,
re-hashes every file and compares the recorded computation identity with the recipe's
before anything is loaded: a missing or altered file is refused naming the file, and a
different identity is refused as a resume, naming the changed settings ("A changed
computation starts a new run"). The plan cursor is the step itself: the plan is a pure
function of the recipe, so update ``step + 1`` is the next one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from .identity import changed_settings, file_sha256
from .registry import RecipeError

FORMAT = "minifield.checkpoint.v1"
FILES = ("model.safetensors", "optimizer.pt", "state.json")


def step_dir(out: Path, step: int) -> Path:
    """The folder of the checkpoint after ``step`` updates."""
    return out / "checkpoints" / f"step-{step:08d}"


def save(
    out: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
) -> Path:
    """Write the checkpoint after ``step`` updates; returns its folder."""
    final = step_dir(out, step)
    tmp = final.parent / f".{final.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(
        {"optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}, tmp / "optimizer.pt"
    )
    (tmp / "state.json").write_text(json.dumps(state | {"step": step}, indent=1, sort_keys=True))
    manifest = {
        "format": FORMAT,
        "step": step,
        "computation_identity": state["computation_identity"],
        "schema_version": state["schema_version"],
        "implementation": state["implementation"],
        "files": {n: file_sha256(tmp / n) for n in FILES},
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest(out: Path) -> Path | None:
    """The checkpoint folder with the most updates under ``out``, or None."""
    found = sorted((out / "checkpoints").glob("step-*[0-9]"))
    return found[-1] if found else None


def verify(folder: Path, identity: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Check a checkpoint before resuming it; returns its ``state.json``.

    Raises:
        RecipeError: no manifest, a file missing or whose SHA-256 differs from the manifest
            (names the file), or a computation identity other than ``identity`` (names the
            changed settings).
    """
    mpath = folder / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RecipeError(
            f"Checkpoint {folder} cannot be resumed: {mpath} is missing or unreadable ({exc}).",
            field=str(mpath),
        ) from None
    for name in FILES:
        path = folder / name
        if not path.exists():
            raise RecipeError(
                f"Checkpoint file {path} is missing; it is not resumed.", field=str(path)
            )
        digest = file_sha256(path)
        if digest != files.get(name):
            raise RecipeError(
                f"Checkpoint file {path} is corrupt: its SHA-256 is {digest[:16]}… but "
                f"manifest.json records {str(files.get(name))[:16]}…; it is not resumed.",
                field=str(path),
            )
    state = json.loads((folder / "state.json").read_text())
    if (
        manifest.get("computation_identity") != identity
        or state.get("computation_identity") != identity
    ):
        changed = changed_settings(state.get("settings", {}), settings) or ["(unknown)"]
        raise RecipeError(
            f"The recipe's computation identity {identity[:16]}… differs from checkpoint "
            f"{folder.name}'s {str(manifest.get('computation_identity'))[:16]}… (changed: "
            f"{', '.join(changed)}); a changed computation starts a new run, not a resume: "
            "use a new output folder.",
            field="computation_identity",
            details={"changed": changed},
        )
    return state


def load(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a verified checkpoint's weights, optimizer state and RNG state in place."""
    device = str(next(model.parameters()).device)
    load_model(model, str(folder / "model.safetensors"), strict=True, device=device)
    blob = torch.load(folder / "optimizer.pt", weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"])
