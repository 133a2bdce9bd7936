"""Computation identity, resume (bitwise on CPU), changed computations and corrupt checkpoints."""

from __future__ import annotations

import pytest
import torch
from minifield_kit import events, recipe_doc, write_recipe
from safetensors.torch import load_file

from akka_optimize.minifield.cli import main
from akka_optimize.minifield.registry import RecipeError
from akka_optimize.minifield.train import Worker

CHANGES = [
    ("training", "seed", 7),
    ("training", "sequence_length", 128),
    ("training", "rows_per_microbatch", 2),
    ("training", "gradient_accumulation_steps", 2),
    ("training", "projection_chunk_size", 32),
    ("training", "max_projection_chunks", 8),
    ("training", "compute_dtype", "bfloat16"),
    ("optimizer", "learning_rate", 5e-3),
    ("optimizer", "beta2", 0.999),
    ("optimizer", "weight_decay", 0.1),
    ("optimizer", "max_grad_norm", 0.5),
    ("qat", "scale_rule", "absmax-v1"),
    ("qat", "distillation_weight", 0.5),
    ("qat", "cross_entropy_weight", 2.0),
    ("qat", "distillation_temperature", 2.0),
]


def _identity(folder, doc):
    return Worker(write_recipe(folder, doc)).identity


@pytest.fixture(scope="module")
def qat_identity(tmp_path_factory, tiny_model_dir):
    """The identity of the base QAT recipe the changes below start from."""
    return _identity(tmp_path_factory.mktemp("base"), recipe_doc(tiny_model_dir, "13.0.0"))


@pytest.mark.parametrize(("where", "key", "value"), CHANGES)
def test_each_bound_setting_changes_the_identity(
    tmp_path, tiny_model_dir, qat_identity, where, key, value
):
    doc = recipe_doc(tiny_model_dir, "13.0.0")
    target = doc["training"] if where == "training" else doc["training"].setdefault(where, {})
    target[key] = value
    assert _identity(tmp_path, doc) != qat_identity


def test_same_settings_same_identity_and_limits_not_bound(tmp_path, tiny_model_dir):
    base = recipe_doc(tiny_model_dir)
    first = _identity(tmp_path / "a", base)
    assert first == _identity(tmp_path / "b", base)  # another folder, same content
    assert first == _identity(tmp_path / "c", recipe_doc(tiny_model_dir, max_steps=2))
    null_rule = recipe_doc(tiny_model_dir, "13.0.0")
    named = recipe_doc(tiny_model_dir, "13.0.0", {"qat": {"scale_rule": "absmean-v1"}})
    assert _identity(tmp_path / "d", null_rule) == _identity(tmp_path / "e", named)
    folder = tmp_path / "f"
    write_recipe(folder, base)
    (folder / "data.jsonl").write_text(
        (folder / "data.jsonl").read_text().replace("Oslo", "Bergen")
    )
    assert Worker(folder / "recipe.json").identity != first  # the data reference is bound


def _weights(worker):
    return load_file(worker.out / "final" / "model.safetensors")


@pytest.mark.parametrize("version", ["12.0.0", "13.0.0"])
def test_resume_continues_bitwise_and_needs_a_new_attempt(tmp_path, tiny_model_dir, version):
    straight = Worker(
        write_recipe(tmp_path / "a", recipe_doc(tiny_model_dir, version, max_steps=4))
    )
    straight.run(attempt="a1")
    doc = recipe_doc(tiny_model_dir, version, max_steps=2, checkpoint_every_steps=2)
    path = write_recipe(tmp_path / "b", doc)
    Worker(path).run(attempt="b1")
    write_recipe(tmp_path / "b", doc | {"limits": {"max_steps": 4, "checkpoint_every_steps": 2}})
    with pytest.raises(RecipeError, match="needs a new attempt identity"):
        Worker(path).run(resume=True, attempt="b1")
    resumed = Worker(path)
    assert resumed.identity == straight.identity
    resumed.run(resume=True, attempt="b2")
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    starts = events(resumed.out, "start")
    assert [(e["step"], e["attempt"]) for e in starts] == [(0, "b1"), (2, "b2")]


def test_changed_computation_is_not_a_resume(tmp_path, tiny_model_dir):
    path = write_recipe(
        tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=2, checkpoint_every_steps=2)
    )
    out = tmp_path / "r" / "out"
    Worker(path, out).run()
    with pytest.raises(RecipeError, match="already holds checkpoint step-00000002"):
        Worker(path, out).run()
    write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, training={"seed": 9}, max_steps=2))
    with pytest.raises(RecipeError) as err:
        Worker(path, out).run(resume=True)
    assert "(changed: seed); a changed computation starts a new run" in str(err.value)
    assert Worker(path).out != out  # by default a changed computation gets a new folder
    write_recipe(tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=1))
    with pytest.raises(RecipeError, match="is after update 2 but the plan has 1 updates"):
        Worker(path, out).run(resume=True)


def test_corrupt_checkpoint_refused_naming_the_file(tmp_path, tiny_model_dir, capsys):
    path = write_recipe(
        tmp_path / "r", recipe_doc(tiny_model_dir, max_steps=2, checkpoint_every_steps=2)
    )
    out = tmp_path / "r" / "out"
    assert main(["run", str(path), "--output", str(out)]) == 0
    bad = out / "checkpoints" / "step-00000002" / "model.safetensors"
    raw = bytearray(bad.read_bytes())
    raw[-3] ^= 0x01
    bad.write_bytes(bytes(raw))
    assert main(["run", str(path), "--output", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert f"error: Checkpoint file {bad} is corrupt" in err


def test_capacity_overflow_refused_before_training(tmp_path, tiny_model_dir, capsys):
    doc = recipe_doc(
        tiny_model_dir, training={"projection_chunk_size": 2, "max_projection_chunks": 3}
    )
    path = write_recipe(tmp_path / "r", doc)
    out = tmp_path / "r" / "out"
    assert main(["run", str(path), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "error: Microbatch 1 of update 1 holds dataset rows row " in err
    assert (
        "more than training.projection_chunk_size × training.max_projection_chunks = 2 × 3 = 6"
        in err
    )
    assert not out.exists()  # nothing was written, nothing trained
