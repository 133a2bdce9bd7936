"""Liger's kernels for Gemma 4 (engine/kernels.py): what refuses them, on this CPU machine.
Their effect on CUDA is tests/engine/test_engine_cuda.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from engine_testkit import liger_patched

from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.kernels import apply_liger, liger_refusal

GEMMA4 = SimpleNamespace(config=SimpleNamespace(model_type="gemma4"))


def test_liger_is_refused_off_cuda_naming_the_setting():
    assert liger_refusal(GEMMA4, torch.device("cpu"), True, False) == (
        "config.engineSettings.kernels.liger.rms_norm: Liger's kernels run on CUDA only; "
        "this run trains on cpu."
    )
    with pytest.raises(EngineError) as err:
        apply_liger(GEMMA4, torch.device("cpu"), False, True)
    assert err.value.field == "config.engineSettings.kernels.liger.geglu"


def test_a_worker_without_the_package_or_a_model_other_than_gemma4_is_refused(monkeypatch):
    import importlib.util

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert liger_refusal(GEMMA4, cuda, True, True) == (
        "config.engineSettings.kernels.liger.rms_norm: the liger-kernel package is not "
        "installed on the worker; install akka-optimize[gpu] there, or set it to false."
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    llama = SimpleNamespace(config=SimpleNamespace(model_type="llama"))
    assert liger_refusal(llama, cuda, False, True) == (
        "config.engineSettings.kernels.liger.geglu: Liger's kernels are verified for Gemma 4 "
        "only, not llama."
    )
    assert liger_refusal(GEMMA4, cuda, True, True) is None


def test_without_the_settings_nothing_is_patched(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    apply_liger(model, torch.device("cpu"), False, False)
    assert liger_patched(model) == {"rms_norm": 0, "geglu": 0}
