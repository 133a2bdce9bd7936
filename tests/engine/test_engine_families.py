"""Every catalog family trains, on the language model only, and scores what the model
scores (issue 15; seeds/000 "Base model flexibility"; DATA-AND-TRAINING-RULES.md §1.9).

Each family is a tiny random-weight model built from a config of its architecture
(tests/engine/families.py), selected the way its catalog entry selects the real model:
the entry's ``loraTargetModules`` (suffix list, or one regular expression) and its
``autoClass`` (multimodal models load with their vision and audio towers).
"""

from __future__ import annotations

import pytest
from engine_testkit import fp32_config, random_rows
from families import FAMILIES, VOCAB, Family, build

from akka_optimize.catalog import load_catalog
from akka_optimize.data.packing import pack
from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.reference import reference_check
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import run_sft
from akka_optimize.engine.targets import check_targets, meta_model

CATALOG = load_catalog(None)
IDS = [f.name for f in FAMILIES]
# Long enough that sliding-window layers (window 4) see more than their window.
ROWS = random_rows(6, seed=5, vocab=VOCAB - 10)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {f.name: build(f, root / f.name) for f in FAMILIES}


def _config(family: Family, **kw):
    entry = CATALOG.get(family.repository)
    return fp32_config(target_modules=entry.target_modules(), auto_class=entry.auto_class, **kw)


def _layer_prefix(family: Family) -> str:
    return "model.language_model.layers." if family.multimodal else "model.layers."


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_trains_two_updates_on_language_model_layers_only(family, family_dirs, tmp_path):
    cfg = _config(family, micro_batch=3, max_steps=2)
    events: list[dict] = []
    res = run_sft(cfg, family_dirs[family.name], ROWS, None, tmp_path, events.append)

    assert res.step == 2 and res.adapter_dir is not None  # saved and adapter-checked
    losses = [e["loss"] for e in events if e["type"] == "metrics"]
    assert len(losses) == 2 and all(0 < x < 10 for x in losses)
    # 2 layers × q, k, v, o, gate, up, down: full paths, language-model layers only.
    assert len(res.adapted_modules) == 14
    prefix = _layer_prefix(family)
    assert all(n.startswith(prefix) for n in res.adapted_modules), res.adapted_modules
    assert f"{prefix}0.self_attn.q_proj" in res.adapted_modules
    assert f"{prefix}1.mlp.down_proj" in res.adapted_modules
    # Random weights start near log(vocabulary): one warning, after the first update,
    # with the loss as measured.
    warnings = [e for e in events if e["type"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["loss"] == losses[0]
    assert "near log(vocabulary)" in warnings[0]["message"]
    started = next(e for e in events if e.get("phase") == "training")
    assert started["adaptedModules"] == res.adapted_modules


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_engine_logprobs_equal_the_models_own_forward_packed(family, family_dirs):
    session = TrainingSession(family_dirs[family.name], _config(family, learning_rate=0.05))
    for _ in range(2):  # a trained adapter, so the LoRA branch takes part
        session.forward_backward(pack(ROWS, 64))
        session.optim_step()
    passes = pack(ROWS, 64)
    assert any(len(p.rows) > 1 for p in passes)  # packing on
    check = reference_check(session, passes, ROWS)
    assert check.positions == sum(ex.supervised_tokens for ex in ROWS)
    assert check.ok and check.max_error <= 1e-4, check


def test_soft_cap_is_the_one_the_models_own_forward_applies(family_dirs):
    # Gemma 4 keeps final_logit_softcapping in text_config and its forward applies it;
    # Gemma 3 4B keeps it there too, but its multimodal forward does not apply it.
    caps = {}
    for name in ("gemma4", "gemma3", "gemma3-text"):
        fam = next(f for f in FAMILIES if f.name == name)
        caps[name] = TrainingSession(family_dirs[name], _config(fam))._cap
    assert caps == {"gemma4": pytest.approx(0.1), "gemma3": None, "gemma3-text": 0.1}


def test_a_regex_matching_nothing_is_refused_naming_the_field(family_dirs):
    fam = next(f for f in FAMILIES if f.name == "gemma4")
    model = meta_model(family_dirs[fam.name], "AutoModelForImageTextToText")
    with pytest.raises(EngineError) as err:
        check_targets(model, r"model\.text\.layers\.\d+\.q_proj", "catalog entry X (family gemma4)")
    assert err.value.field == "config.hyperparams.lora.targetModules"
    assert "loraTargetModules of catalog entry X (family gemma4)" in err.value.message
    # The catalog's own regex selects the 14 language-model projections and no tower.
    hits = check_targets(model, CATALOG.get(fam.repository).target_modules())
    assert len(hits) == 14 and not any("tower" in h for h in hits)


def test_a_list_target_the_model_lacks_is_refused(family_dirs):
    with pytest.raises(EngineError) as err:
        TrainingSession(family_dirs["llama"], fp32_config(target_modules=("q_proj", "qkv_proj")))
    assert err.value.field == "config.hyperparams.lora.targetModules"
    assert "['qkv_proj']" in err.value.message
