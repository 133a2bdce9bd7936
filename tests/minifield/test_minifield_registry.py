"""Strategy registry, listing and recipe validation (no model needed)."""

from __future__ import annotations

import json

import pytest
from minifield_kit import PAGE_FRAGMENT, recipe_doc

from akka_optimize.minifield.cli import main
from akka_optimize.minifield.registry import RecipeError, lookup, select


def test_list_strategies_text_names_versions_implementations_and_defaults(capsys):
    assert main(["--list-strategies"]) == 0
    out = capsys.readouterr().out
    assert "packed-sft  computation 12.0.0" in out
    assert "packed-qat  computation 13.0.0" in out
    assert "two-stage  computation 11.0.0" in out
    assert "implementations: hf-causal-lm-v1" in out
    assert "training.sequence_length = 8192" in out
    assert "training.seed = 42" in out
    assert "limits.checkpoint_every_steps = 100" in out
    assert "training.optimizer.learning_rate = 1e-05" in out
    assert "training.qat.scale_rule = None" in out


def test_list_strategies_json():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["--list-strategies", "-o", "json"]) == 0
    items = {s["name"]: s for s in json.loads(buf.getvalue())}
    assert items["packed-sft"]["computation"] == "12.0.0"
    assert items["packed-qat"]["computation"] == "13.0.0"
    assert items["two-stage"]["implementations"] == ["hf-causal-lm-v1"]
    sft = items["packed-sft"]["settings"]
    assert sft["training.quantization_profile"] == "disabled-v1"
    assert sft["training.schedule"] == "constant-v1"
    assert sft["training.optimizer.beta2"] == 0.95
    qat = items["packed-qat"]["settings"]
    assert qat["training.quantization_profile"] == "ternary-g128-v1"
    assert qat["training.schedule"] == "immediate-v1"
    assert qat["training.qat.distillation_weight"] == 1.0
    assert items["two-stage"]["settings"]["training.updates"] == "(required)"


def test_dispatch_on_both_identifiers():
    assert lookup("12.0.0", "hf-causal-lm-v1").name == "packed-sft"
    assert lookup("13.0.0", "hf-causal-lm-v1").name == "packed-qat"
    with pytest.raises(RecipeError, match="schema_version \\{'x': 1\\}"):
        lookup({"x": 1}, "hf-causal-lm-v1")
    with pytest.raises(RecipeError) as err:
        lookup("12.0.0", "mlx-llama-v2")
    msg = str(err.value)
    assert (
        "No installed strategy takes schema_version '12.0.0' with model.implementation 'mlx-llama-v2'"
        in msg
    )
    assert "schema_version '13.0.0' with model.implementation 'hf-causal-lm-v1' (packed-qat)" in msg


def test_page_fragment_accepted_and_defaults():
    strategy, recipe = select(recipe_doc("m", training=None) | {"training": PAGE_FRAGMENT})
    assert strategy.name == "packed-sft"
    assert recipe.training.target_capacity == 2048
    _, bare = select({k: v for k, v in recipe_doc("m").items() if k != "training"})
    assert bare.training.sequence_length == 8192 and bare.training.seed == 42
    for n in (2, 32768):
        select(recipe_doc("m", training={"sequence_length": n}))


@pytest.mark.parametrize(
    ("training", "sentence"),
    [
        ({"sequence_length": 1}, "training.sequence_length must be at least 2, not 1."),
        ({"sequence_length": 32769}, "training.sequence_length must be at most 32768, not 32769."),
        ({"rows_per_microbatch": 0}, "training.rows_per_microbatch must be at least 1, not 0."),
        ({"seed": -1}, "training.seed must be at least 0, not -1."),
        ({"compute_dtype": "float16"}, "training.compute_dtype must be 'bfloat16' or 'float32'"),
        (
            {"quantization_profile": "ternary-g128-v1"},
            "training.quantization_profile must be 'disabled-v1'",
        ),
        (
            {"optimizer": {"learning_rate": 0}},
            "training.optimizer.learning_rate must be above 0.0, not 0.",
        ),
        ({"epochs": 2}, "training.epochs is not a recipe field"),
    ],
)
def test_bad_settings_refused_with_field_and_bound(training, sentence):
    with pytest.raises(RecipeError) as err:
        select(recipe_doc("m", training=training))
    assert sentence in str(err.value)
    assert err.value.field == f"training.{next(iter(training))}" or "optimizer" in err.value.field


def test_two_stage_updates_must_equal_max_steps():
    doc = recipe_doc("m", "11.0.0", training={"updates": 5}, max_steps=4)
    with pytest.raises(RecipeError) as err:
        select(doc)
    assert "training.updates is 5 but limits.max_steps is 4" in str(err.value)
    assert err.value.field == "training.updates"
    select(recipe_doc("m", "11.0.0", training={"updates": 4}, max_steps=4))


def test_qat_objective_cannot_be_all_zero():
    doc = recipe_doc(
        "m", "13.0.0", training={"qat": {"cross_entropy_weight": 0, "distillation_weight": 0}}
    )
    with pytest.raises(RecipeError, match="both 0, which disables the whole objective"):
        select(doc)


def test_unknown_pair_from_the_cli(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recipe_doc("m", "9.0.0")))
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: No installed strategy takes schema_version '9.0.0'")
