"""Shared by the tinker-cookbook tests (issue 53): a live service with several CPU devices,
the cookbook's ``TINKER_API_KEY`` and ``HF_HUB_OFFLINE``, and the base model's tokenizer
taken from the service and registered with the cookbook, as README's Tinker section says.

The cookbook's recipes load a tokenizer with ``tinker_cookbook.tokenizer_utils.get_tokenizer
(model_name)``, which asks the model hub for an unknown name. Its own hook,
``register_tokenizer(name, factory)``, takes the tokenizer a training client's
``get_tokenizer()`` returns: the service answers ``get_info`` with the folder of the base
model's tokenizer, so nothing reaches a hub.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tinker_kit import TINY, created, tinker_service

from helpers import LiveService

RENDERER = "role_colon"
"""The renderer the cookbook recommends for a base (non-chat) Llama-family model
(``model_info``: ``Llama-3.2-1B`` and the like); the tiny model is a SmolLM2 (Llama) one."""


def recipe_fields(log: Path, svc: LiveService) -> dict[str, Any]:
    """The fields every recipe's ``Config`` here shares: log folder, the tiny model and
    :data:`RENDERER`, rank 4, the service's URL."""
    return {
        "log_path": str(log),
        "model_name": TINY,
        "renderer_name": RENDERER,
        "lora_rank": 4,
        "base_url": svc.url,
    }


def served_tokenizer(url: str, key: str, base_model: str = TINY) -> Any:
    """The tokenizer of ``base_model`` as a training client's ``get_tokenizer()`` gives it
    (its own session, closed at once so its device is free again)."""
    import tinker

    client = tinker.ServiceClient(base_url=url, api_key=key)
    trainer = created(client.create_lora_training_client(base_model=base_model, rank=1))
    tokenizer = trainer.get_tokenizer()
    client.close("success").result()
    return tokenizer


@contextmanager
def cookbook_service(folder: Path, devices: int = 3) -> Iterator[tuple[LiveService, Any]]:
    """A live service (:func:`tinker_kit.tinker_service`, ``devices`` CPU devices) whose
    ``demo`` key is the cookbook's ``TINKER_API_KEY``, and :data:`TINY`'s tokenizer, taken
    from the service and registered with the cookbook; all undone on exit."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer, unregister_tokenizer

    with tinker_service(folder, devices=devices) as (svc, keys), pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINKER_API_KEY", keys["demo"])
        mp.setenv("HF_HUB_OFFLINE", "1")
        tokenizer = served_tokenizer(svc.url, keys["demo"])
        register_tokenizer(TINY, lambda: tokenizer)
        try:
            yield svc, tokenizer
        finally:
            unregister_tokenizer(TINY)
            end_runs(svc)


def end_runs(svc: LiveService) -> None:
    """Cancel the ``demo`` project's runs still live (a recipe that never closes its
    ``ServiceClient``; a client whose recipe failed while its worker loaded) and wait
    until each is final, so no worker outlives its service."""
    from akka_optimize.jobs.states import TERMINAL
    from jobs.jobs_helpers import wait_state

    runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
    live = [r["id"] for r in runs if r["state"] not in TERMINAL]
    for run_id in live:
        svc.cli("training", "runs", "cancel", run_id)
    for run_id in live:
        wait_state(svc, run_id, tuple(TERMINAL), timeout=120)


def registered_tinker_runs(svc: LiveService) -> list[dict[str, Any]]:
    """The ``demo`` project's Tinker runs that registered a model version (a sampler save),
    newest first, as ``GET /v1/training/runs/ID`` gives them (the tokenizer's client saves
    nothing)."""
    runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
    details = [svc.api("GET", f"/v1/training/runs/{r['id']}").json() for r in runs]
    return [d for d in details if d["method"] == "tinker" and d["results"].get("model")]
