"""First-loss sanity (DATA-AND-TRAINING-RULES.md §2 rule 10) and the start warning of bf16 on a
CPU without bf16 instructions: warnings, never a change."""

from __future__ import annotations

import math

from akka_optimize.engine.sanity import first_loss_warning


def test_a_plausible_first_loss_gives_no_warning() -> None:
    assert first_loss_warning(1.2, 262_144) is None
    assert first_loss_warning(3.0, 262_144) is None


def test_above_three_warns_naming_the_likely_causes() -> None:
    w = first_loss_warning(3.5, 262_144)
    assert w is not None and w["type"] == "warning" and w["loss"] == 3.5
    assert "above 3.0" in w["message"]
    for cause in ("loss mask", "weights", "vision or audio tower"):
        assert cause in w["message"]


def test_near_log_vocab_is_called_random_prediction() -> None:
    w = first_loss_warning(11.9, 262_144)
    assert w is not None and "near log(vocabulary) = 12.48" in w["message"]
    assert w["logVocab"] == math.log(262_144)
    # a small vocabulary: near log(V) although below 3.0
    assert "near log(vocabulary)" in first_loss_warning(2.9, 32)["message"]


AVX2_ONLY = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})


def test_bf16_on_a_cpu_without_bf16_instructions_warns_at_the_start():
    import torch

    from akka_optimize.engine.sanity import slow_bf16_warning

    w = slow_bf16_warning("cpu", torch.bfloat16, AVX2_ONLY)
    assert w is not None and w["code"] == "bf16_without_cpu_support" and w["step"] == 0
    assert "Set config.model.precision to fp32 on this machine" in w["message"]
    for flag in ("avx512_bf16", "amx_bf16", "bf16"):
        assert slow_bf16_warning("cpu", torch.bfloat16, AVX2_ONLY | {flag}) is None
    assert slow_bf16_warning("cpu", torch.float32, AVX2_ONLY) is None
    assert slow_bf16_warning("cuda", torch.bfloat16, AVX2_ONLY) is None
    assert slow_bf16_warning("cpu", torch.bfloat16, None) is None  # flags unknown


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    from akka_optimize.engine.sanity import cpu_flags

    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert cpu_flags(str(x86)) == {"fpu", "avx2", "avx512_bf16"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert "bf16" in cpu_flags(str(arm))
    assert cpu_flags(str(tmp_path / "missing")) is None


def test_a_bf16_run_emits_the_warning_before_it_trains(tiny_model_dir, tmp_path, monkeypatch):
    from engine_testkit import fp32_config, random_rows

    from akka_optimize.engine import sanity
    from akka_optimize.engine.sft import run_sft

    monkeypatch.setattr(sanity, "cpu_flags", lambda: AVX2_ONLY)
    events: list[dict] = []
    cfg = fp32_config(precision="bf16", max_steps=1)
    run_sft(cfg, tiny_model_dir, random_rows(4), None, tmp_path, events.append)
    kinds = [(e["type"], e.get("code") or e.get("phase")) for e in events]
    assert kinds.index(("warning", "bf16_without_cpu_support")) < kinds.index(("phase", "training"))
