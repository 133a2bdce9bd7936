"""A saved adapter is checked against its base model (seeds/001: the adapter check)."""

from __future__ import annotations

import pytest
from engine_testkit import fp32_config, random_rows
from safetensors.torch import load_file, save_file

from akka_optimize.engine.checks import verify_adapter
from akka_optimize.engine.errors import AdapterCheckError
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import recoverable_steps, run_sft

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    TrainingSession(tiny_model_dir, fp32_config()).save_adapter(folder)
    tensors = load_file(folder / "adapter_model.safetensors")
    return folder, tensors, sum(t.numel() for t in tensors.values())


def _copy(src, dst, tensors):
    dst.mkdir()
    (dst / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    save_file(tensors, dst / "adapter_model.safetensors")
    return dst


def test_a_good_adapter_passes_with_its_counts(tiny_model_dir, saved):
    folder, tensors, params = saved
    # tiny model: 2 layers × 7 modules × (A, B) = 28 tensors
    assert len(tensors) == 28
    assert verify_adapter(folder, tiny_model_dir, 4, TARGETS) == {
        "tensors": 28,
        "parameters": params,
    }


def test_missing_and_misnamed_tensors_fail_with_counts(tiny_model_dir, saved, tmp_path):
    folder, tensors, params = saved
    a_names = sorted(n for n in tensors if "lora_A" in n)
    broken = dict(tensors)
    dropped = broken.pop(a_names[0])
    broken[a_names[1].replace("lora_A", "lora_X")] = broken.pop(a_names[1])  # misnamed
    bad = _copy(folder, tmp_path / "bad", broken)
    with pytest.raises(AdapterCheckError) as e:
        verify_adapter(bad, tiny_model_dir, 4, TARGETS)
    err = e.value
    assert (err.held_tensors, err.expected_tensors) == (27, 28)
    assert (err.held_parameters, err.expected_parameters) == (params - dropped.numel(), params)
    assert "2 missing" in err.message and "1 extra or misnamed" in err.message
    assert f"holds 27 tensors ({params - dropped.numel():,} parameters)" in err.message
    assert f"expects 28 tensors ({params:,} parameters)" in err.message


def test_wrong_rank_and_unreadable_files_fail(tiny_model_dir, saved, tmp_path):
    folder, _, params = saved
    with pytest.raises(AdapterCheckError, match="of another shape") as e:
        verify_adapter(folder, tiny_model_dir, 8, TARGETS)
    assert e.value.expected_parameters == 2 * params and "r=4, expected 8" in e.value.message
    bad = _copy(folder, tmp_path / "cut", load_file(folder / "adapter_model.safetensors"))
    data = (bad / "adapter_model.safetensors").read_bytes()
    (bad / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(AdapterCheckError, match="cannot be read") as e:
        verify_adapter(bad, tiny_model_dir, 4, TARGETS)
    assert (e.value.held_tensors, e.value.expected_tensors) == (0, 28)


def test_a_run_fails_at_a_save_whose_adapter_is_corrupt(tiny_model_dir, tmp_path, monkeypatch):
    original = TrainingSession.save_adapter

    def corrupting(self, directory):
        out = original(self, directory)
        if self.step == 2:
            (out / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
        return out

    monkeypatch.setattr(TrainingSession, "save_adapter", corrupting)
    events: list[dict] = []
    cfg = fp32_config(save_every_steps=1)
    with pytest.raises(AdapterCheckError, match="expects 28 tensors"):
        run_sft(cfg, tiny_model_dir, random_rows(4, seed=2), None, tmp_path, events.append)
    saves = [e for e in events if e["type"] == "save"]
    assert [(s["step"], s["adapterDir"] is None) for s in saves] == [(1, False), (2, True)]
    assert "expects 28 tensors" in saves[1]["adapterCheck"]
    assert 2 in recoverable_steps(tmp_path)  # the state is kept, the adapter is not
    assert not (tmp_path / "step-00000002" / "adapter").exists()
    assert [e["step"] for e in events if e["type"] == "metrics"] == [1, 2]


def test_an_adapter_saved_with_another_scaling_fails_the_run(tiny_model_dir, tmp_path, monkeypatch):
    """A save whose adapter_config.json says lora_alpha = r (scaling 1) while the run
    trained with alpha 8 at rank 4 (scaling 2) would be served at half its trained
    strength: the adapter check refuses it (issue 56 item 1)."""
    import json

    original = TrainingSession.save_adapter

    def rescaled(self, directory):
        out = original(self, directory)
        conf = json.loads((out / "adapter_config.json").read_text())
        (out / "adapter_config.json").write_text(json.dumps({**conf, "lora_alpha": conf["r"]}))
        return out

    monkeypatch.setattr(TrainingSession, "save_adapter", rescaled)
    events: list[dict] = []
    with pytest.raises(AdapterCheckError, match=r"lora_alpha=4, expected 8 .*alpha/r = 2\)"):
        run_sft(
            fp32_config(), tiny_model_dir, random_rows(2, seed=2), None, tmp_path, events.append
        )
    assert [e["adapterDir"] for e in events if e["type"] == "save"] == [None]
