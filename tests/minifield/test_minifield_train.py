"""Direct runs on the tiny model (tied embedding), CPU: packed SFT, two-stage and QAT."""

from __future__ import annotations

import json

import pytest
import torch
from minifield_kit import data_loss, events, recipe_doc, write_recipe
from safetensors.torch import load_file

from akka_optimize.minifield.export import load_export
from akka_optimize.minifield.ternary import make_ternary
from akka_optimize.minifield.train import Worker

STEP_FIELDS = (
    "grad_norm",
    "update_norm",
    "loss",
    "input_tokens",
    "supervised_tokens",
    "step_time_s",
)


@pytest.fixture
def run(tmp_path, tiny_model_dir):
    """Write a recipe into ``tmp_path/folder`` and run it; returns (worker, end event)."""

    def go(version="12.0.0", training=None, folder="r", **limits):
        path = write_recipe(
            tmp_path / folder, recipe_doc(tiny_model_dir, version, training, **limits)
        )
        worker = Worker(path, tmp_path / folder / "out")
        return worker, worker.run()

    return go


def _start(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def _final(worker):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(worker.out / "final", dtype=torch.float32)


def test_packed_sft_lowers_loss_and_updates_every_leaf(run, tiny_model_dir):
    worker, end = run("12.0.0", {"compute_dtype": "bfloat16"})  # the page's BF16 forward
    start, final = _start(tiny_model_dir), _final(worker)
    assert data_loss(final, worker) < data_loss(start, worker) - 0.5
    start_p = dict(start.named_parameters())
    for name, p in final.named_parameters():
        assert not torch.equal(p, start_p[name]), f"{name} was not updated"
    steps = events(worker.out)
    assert len(steps) == len(worker.plan.updates) == end["step"] == 6
    assert all(all(k in e for k in STEP_FIELDS) for e in steps)
    gen = json.loads((worker.out / "generation.json").read_text())
    assert sum(e["input_tokens"] for e in steps) == gen["totals"]["input_tokens"]
    assert sum(e["supervised_tokens"] for e in steps) == gen["totals"]["supervised_tokens"]
    meta = json.loads((worker.out / "final" / "minifield.json").read_text())
    assert (meta["schema_version"], meta["implementation"]) == ("12.0.0", "hf-causal-lm-v1")
    assert gen["computation_identity"] == meta["computation_identity"] == worker.identity
    optimizer = gen["recipe"]["training"]["optimizer"]  # only learning_rate given: the defaults
    assert optimizer == meta["recipe"]["training"]["optimizer"]
    assert optimizer | {"learning_rate": 1e-5} == {
        "name": "adamw",
        "learning_rate": 1e-5,
        "beta1": 0.9,
        "beta2": 0.95,
        "epsilon": 1e-8,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
    }


def test_checkpoints_every_n_updates_hold_fp32_state(run):
    worker, _ = run("12.0.0", checkpoint_every_steps=2, max_steps=5)
    folders = sorted(p.name for p in (worker.out / "checkpoints").iterdir())
    assert folders == ["step-00000002", "step-00000004"]
    ck = worker.out / "checkpoints" / "step-00000004"
    assert {t.dtype for t in load_file(ck / "model.safetensors").values()} == {torch.float32}
    opt = torch.load(ck / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert {v.dtype for s in opt.values() for k, v in s.items() if k != "step"} == {torch.float32}
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["schema_version"] == "12.0.0"
    assert manifest["implementation"] == "hf-causal-lm-v1"
    assert manifest["computation_identity"] == worker.identity


def test_two_stage_keeps_embedding_and_head_bit_identical(run, tiny_model_dir):
    worker, _ = run("11.0.0", {"updates": 3}, max_steps=3)
    start, final = _start(tiny_model_dir), _final(worker)
    assert torch.equal(final.get_input_embeddings().weight, start.get_input_embeddings().weight)
    assert final.get_output_embeddings().weight is final.get_input_embeddings().weight
    name = "model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(
        dict(final.named_parameters())[name], dict(start.named_parameters())[name]
    )
    steps = events(worker.out)
    assert len(steps) == 3
    for e in steps:
        assert e["loss"] == pytest.approx(e["routing_loss"] + e["argument_loss"])


def test_packed_qat_freezes_embedding_and_export_matches_qat_forward(run, tiny_model_dir):
    worker, end = run("13.0.0", max_steps=3)
    start, final = _start(tiny_model_dir), _final(worker)
    emb0 = start.get_input_embeddings().weight.to(torch.bfloat16).float()
    assert torch.equal(final.get_input_embeddings().weight, emb0)  # frozen at its BF16 value
    steps = events(worker.out)
    assert all(e["distillation"] > 0 for e in steps)
    make_ternary(final, "absmean-v1")
    loaded, header = load_export(worker.out / "export" / "model.minifield")
    ids = torch.tensor(worker.examples[0].input_ids)[None]
    with torch.no_grad():
        diff = (loaded(input_ids=ids).logits - final.eval()(input_ids=ids).logits).abs().max()
    assert diff <= 1e-4
    assert header["schema_version"] == "13.0.0" and header["implementation"] == "hf-causal-lm-v1"
    assert header["computation_identity"] == worker.identity
    assert header["quantization"]["scale_rule"] == "absmean-v1"
    assert end["export"].endswith("model.minifield")


def test_qat_without_distillation_is_cross_entropy(run):
    worker, _ = run("13.0.0", {"qat": {"distillation_weight": 0}}, folder="nokl", max_steps=2)
    for e in events(worker.out):
        assert e["distillation"] == 0.0 and e["loss"] == e["cross_entropy"]


def test_qat_trainer_runs_ternary_body_over_fp32_masters(tmp_path, tiny_model_dir):
    from akka_optimize.minifield.ternary import TernaryLinear
    from akka_optimize.minifield.train import build_trainer

    worker = Worker(write_recipe(tmp_path, recipe_doc(tiny_model_dir, "13.0.0")))
    trainer = build_trainer(worker.strategy, worker.recipe, worker.model_dir, worker.device)
    layer = trainer.model.model.layers[0]
    for lin in (layer.self_attn.q_proj, layer.mlp.down_proj):
        assert isinstance(lin, TernaryLinear) and lin.weight.dtype == torch.float32
    assert not trainer.model.get_input_embeddings().weight.requires_grad
    assert all(p.dtype == torch.float32 for p in trainer.params)
    assert isinstance(trainer.teacher.body.layers[0].mlp.down_proj, torch.nn.Linear)


def test_model_folder_without_tokenizer_refused(tmp_path, tiny_model_dir):
    from akka_optimize.minifield.registry import RecipeError

    (tmp_path / "empty").mkdir()
    path = write_recipe(tmp_path / "r", recipe_doc(tmp_path / "empty"))
    with pytest.raises(RecipeError, match="is not a Hugging Face model folder with a tokenizer"):
        Worker(path)
