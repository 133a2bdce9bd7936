"""Submit-time check that a base model's catalog LoRA targets select something.

A catalog entry's ``loraTargetModules`` (suffix list or one regular expression,
engine/targets.py) that matches no linear module of the model would train nothing it
was meant to. When the base model is ``READY`` its ``config.json`` is at hand, so the
module tree is built on the ``meta`` device (no weights read) and the targets are
matched before the run is recorded; the engine repeats the check when it loads.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..engine.errors import EngineError
from ..engine.targets import check_targets, meta_model
from ..errors import InvalidRequest


@functools.lru_cache(maxsize=16)
def _problem(model_dir: str, _mtime: float, targets: tuple[str, ...] | str, auto: str, where: str):
    try:
        check_targets(meta_model(Path(model_dir), auto), targets, where)
    except EngineError as exc:
        return exc.message
    return None


def refuse_unmatched_targets(model_dir: Path, entry: Any) -> None:
    """Refuse (400, ``field`` ``baseModel``) a run whose base model's catalog entry names
    LoRA targets that match no linear module; the sentence names ``loraTargetModules``,
    the entry and its family.

    Raises:
        InvalidRequest: code ``lora_targets_match_nothing``.
    """
    targets = entry.lora_target_modules
    where = f"catalog entry {entry.repository} (family {entry.family})"
    config = Path(model_dir) / "config.json"
    mtime = config.stat().st_mtime if config.exists() else 0.0
    problem = _problem(str(model_dir), mtime, targets, entry.auto_class, where)
    if problem:
        raise InvalidRequest(
            f"baseModel {entry.repository}: {problem} Fix the catalog entry's loraTargetModules.",
            field="baseModel",
            code="lora_targets_match_nothing",
        )
