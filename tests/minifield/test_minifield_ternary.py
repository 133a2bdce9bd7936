"""ternary-g128-v1: scales, codes, the straight-through forward, and the export file."""

from __future__ import annotations

import pytest
import torch

from akka_optimize.minifield.export import (
    ExportError,
    decode_tensor,
    load_export,
    read_export,
    ternary_bytes,
    write_export,
)
from akka_optimize.minifield.ternary import (
    TernaryLinear,
    eligible_linears,
    group_scales,
    make_ternary,
    pack_codes,
    quantize,
    unpack_codes,
)


def test_absmean_scale_rule_and_codes():
    w = torch.cat([torch.full((64,), 0.5), torch.full((64,), -0.1), torch.zeros(128)])
    s = group_scales(w, "absmean-v1")
    assert s.tolist() == [pytest.approx(0.3, rel=1e-3), 2.0**-14]  # mean |w|, then the floor
    codes, _ = quantize(w, "absmean-v1")
    # 0.5 / 0.3 rounds to 2 -> +1; -0.1 / 0.3 rounds to 0; zeros stay 0
    assert codes[:64].tolist() == [1] * 64 and codes[64:].tolist() == [0] * 192
    assert group_scales(w, "absmax-v1")[0].item() == 0.5
    assert s.half().float().equal(s)  # scales are FP16 values


def test_pack_unpack_roundtrip_and_bit_layout():
    codes = torch.tensor([0, 1, -1, 0, 1, 1, 1, 1], dtype=torch.int8)
    data = pack_codes(codes)
    assert data == bytes([0b00_10_01_00, 0b01_01_01_01])
    assert unpack_codes(data, 8).tolist() == codes.tolist()
    with pytest.raises(ValueError, match="invalid bit pattern 11"):
        unpack_codes(bytes([0b11]), 4)


def test_straight_through_forward_and_gradient():
    lin = torch.nn.Linear(128, 4, bias=False)
    t = TernaryLinear(lin, "absmean-v1")
    x = torch.randn(3, 128)
    codes, scales = quantize(lin.weight, "absmean-v1")
    q = (codes.float().reshape(-1, 128) * scales[:, None]).reshape(4, 128)
    y = t(x)
    assert torch.allclose(y, x @ q.T, atol=1e-6)
    y.sum().backward()
    assert torch.allclose(lin.weight.grad, x.sum(0).expand(4, 128))  # identity through Ŵ


def _tiny_llama(vocab: int = 256):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def test_export_roundtrip_logits_and_layout(tmp_path):
    model = _tiny_llama()
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.copy_(emb.to(torch.bfloat16).float())
    make_ternary(model, "absmean-v1")
    path = write_export(tmp_path / "m.minifield", model, {"schema_version": "13.0.0"}, "absmean-v1")
    loaded, header = load_export(path)
    ids = torch.arange(20)[None]
    with torch.no_grad():
        assert (loaded(input_ids=ids).logits - model(input_ids=ids).logits).abs().max() <= 1e-4
    assert header["schema_version"] == "13.0.0" and header["quantization"]["group_size"] == 128
    _, data = read_export(path)
    for e in header["tensors"]:
        if e["encoding"] == "ternary2":
            w = decode_tensor(e, data).reshape(-1, 128)
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
            assert set((w / scale).round().unique().tolist()) <= {-1.0, 0.0, 1.0}


def test_corrupt_export_refused(tmp_path):
    model = _tiny_llama()
    make_ternary(model, "absmean-v1")
    path = write_export(tmp_path / "m.minifield", model, {}, "absmean-v1")
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ExportError, match="export identity .* does not match"):
        load_export(path)


def test_export_size_formula_on_the_tiny_model(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    n_body = sum(m.weight.numel() for _, m in eligible_linears(model))
    assert n_body == 2 * (64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3)  # q,o + k,v + gate,up,down
    make_ternary(model, "absmean-v1")
    path = write_export(tmp_path / "tiny.minifield", model, {}, "absmean-v1")
    header, data = read_export(path)
    tern = [e for e in header["tensors"] if e["encoding"] == "ternary2"]
    body = sum(e["nbytes"] + e["scales_nbytes"] for e in tern)
    assert body == ternary_bytes(n_body) == n_body * (2 + 16 / 128) / 8
    emb = next(e for e in header["tensors"] if e["encoding"] == "bfloat16")
    assert emb["nbytes"] == model.get_input_embeddings().weight.numel() * 2
    assert "lm_head.weight" not in {e["name"] for e in header["tensors"]}  # tied, stored once
    others = sum(e["nbytes"] for e in header["tensors"] if e["encoding"] == "float32")
    assert body + emb["nbytes"] + others <= len(data) < body + emb["nbytes"] + others + 64 * 40
    with pytest.raises((OSError, ValueError)):  # not a Hugging Face folder: load_export reads it
        AutoModelForCausalLM.from_pretrained(tmp_path)
