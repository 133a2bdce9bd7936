"""The ``minifield.ternary.v1`` export and its loader.

One file (all integers little-endian)::

    bytes 0–7    magic b"MFTERNV1"
    bytes 8–15   uint64 H: length of the header
    bytes 16…    header: UTF-8 JSON, H bytes
    then zero bytes up to a multiple of 64; the data section starts there

The header holds ``format``, ``strategy``, ``computation``, ``schema_version``,
``implementation``, ``computation_identity``, ``quantization`` (profile, group size, scale
rule, scale dtype), ``config`` (the model's Hugging Face config), ``tied_embedding``,
``tensors`` and ``export_identity``. Each tensor entry is ``{"name", "shape", "encoding",
"offset", "nbytes"}`` with offsets relative to the data section (each a multiple of 64):

* ``ternary2`` (eligible body weights, :mod:`.ternary`): ``offset``/``nbytes`` hold the
  2-bit codes (``numel / 4`` bytes), ``scales_offset``/``scales_nbytes`` the FP16 scales
  (``numel / 128 × 2`` bytes), so such a weight takes ``numel × (2 + 16/128) / 8`` bytes;
* ``bfloat16``: the tied embedding (and LM head), raw BF16;
* ``float32``: the remaining small tensors (norm weights, biases), raw FP32.

``export_identity`` is the SHA-256 of the canonical JSON of the header without
``export_identity`` followed by the data section; :func:`load_export` recomputes it and
refuses a file that does not match. Decoded weights are exactly the QAT forward's
``c · s`` values, so the loaded model's logits equal the QAT forward's up to float
rounding (FP32: max |Δ| ≤ 1e-4 on the tiny test model; README "minifield-worker").
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .identity import canonical
from .ternary import (
    GROUP,
    dequantize,
    describe,
    eligible_linears,
    pack_codes,
    quantize,
    unpack_codes,
)

MAGIC = b"MFTERNV1"
FORMAT = "minifield.ternary.v1"
ALIGN = 64


class ExportError(ValueError):
    """A file that is not a valid ``minifield.ternary.v1`` export."""


def ternary_bytes(numel: int) -> int:
    """Bytes one ternary weight of ``numel`` elements takes: 2 bits each + FP16 per 128."""
    return numel // 4 + (numel // GROUP) * 2


def _raw(t: torch.Tensor, encoding: str) -> bytes:
    if encoding == "bfloat16":
        return t.detach().cpu().to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    return t.detach().cpu().float().numpy().astype("<f4").tobytes()


def _blobs(model: nn.Module, rule: str) -> tuple[list[dict[str, Any]], list[bytes]]:
    quantized = {name + ".weight" for name, _ in eligible_linears(model)}
    emb = model.get_input_embeddings().weight
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    seen: set[int] = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:  # the tied LM head is the embedding
            continue
        seen.add(id(t))
        entry: dict[str, Any] = {"name": name, "shape": list(t.shape)}
        if name in quantized:
            codes, scales = quantize(t, rule)
            entry["encoding"] = "ternary2"
            parts = [pack_codes(codes), scales.cpu().half().numpy().astype("<f2").tobytes()]
        else:
            entry["encoding"] = "bfloat16" if t is emb else "float32"
            parts = [_raw(t, entry["encoding"])]
        entries.append(entry)
        blobs.append(parts[0])
        if len(parts) > 1:
            blobs.append(parts[1])
    return entries, blobs


def _layout(entries: list[dict[str, Any]], blobs: list[bytes]) -> bytes:
    data = bytearray()
    it = iter(blobs)
    for e in entries:
        keys = [("offset", "nbytes")] + (
            [("scales_offset", "scales_nbytes")] if e["encoding"] == "ternary2" else []
        )
        for off_key, n_key in keys:
            blob = next(it)
            data += b"\0" * (-len(data) % ALIGN)
            e[off_key], e[n_key] = len(data), len(blob)
            data += blob
    return bytes(data)


def write_export(path: Path, model: nn.Module, header: dict[str, Any], rule: str) -> Path:
    """Write ``model`` (after QAT) as a ``minifield.ternary.v1`` file at ``path``."""
    entries, blobs = _blobs(model, rule)
    data = _layout(entries, blobs)
    head = dict(header) | {
        "format": FORMAT,
        "quantization": describe(rule),
        "config": model.config.to_dict(),
        "tied_embedding": model.get_output_embeddings().weight
        is model.get_input_embeddings().weight,
        "tensors": entries,
    }
    head["export_identity"] = hashlib.sha256(canonical(head) + data).hexdigest()
    raw = json.dumps(head, sort_keys=True).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        prefix = MAGIC + struct.pack("<Q", len(raw)) + raw
        f.write(prefix + b"\0" * (-len(prefix) % ALIGN) + data)
    os.replace(tmp, path)
    return path


def read_export(path: Path) -> tuple[dict[str, Any], bytes]:
    """(header, data section) of an export, its identity verified.

    Raises:
        ExportError: wrong magic, truncated, bad header or an export identity mismatch.
    """
    blob = Path(path).read_bytes()
    if blob[:8] != MAGIC or len(blob) < 16:
        raise ExportError(f"{path} is not a {FORMAT} file (magic {blob[:8]!r})")
    (n,) = struct.unpack("<Q", blob[8:16])
    try:
        header = json.loads(blob[16 : 16 + n])
    except ValueError as exc:
        raise ExportError(f"{path}: the header is not JSON ({exc})") from None
    start = 16 + n + (-(16 + n) % ALIGN)
    data = blob[start:]
    claimed = header.pop("export_identity", None)
    actual = hashlib.sha256(canonical(header) + data).hexdigest()
    if header.get("format") != FORMAT or claimed != actual:
        raise ExportError(
            f"{path}: export identity {str(claimed)[:16]}… does not match its content ({actual[:16]}…)"
        )
    header["export_identity"] = claimed
    return header, data


def decode_tensor(entry: dict[str, Any], data: bytes) -> torch.Tensor:
    """One tensor of an export as FP32."""
    shape = tuple(entry["shape"])
    raw = data[entry["offset"] : entry["offset"] + entry["nbytes"]]
    enc = entry["encoding"]
    if enc == "ternary2":
        n = int(np.prod(shape))
        sraw = data[entry["scales_offset"] : entry["scales_offset"] + entry["scales_nbytes"]]
        scales = torch.from_numpy(np.frombuffer(sraw, dtype="<f2").astype(np.float32))
        return dequantize(unpack_codes(raw, n), scales, shape)
    if enc == "bfloat16":
        bits = torch.from_numpy(np.frombuffer(raw, dtype="<i2").copy())
        return bits.view(torch.bfloat16).float().reshape(shape)
    if enc == "float32":
        return torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy()).reshape(shape)
    raise ExportError(f"tensor {entry['name']}: unknown encoding {enc!r}")


def load_export(path: Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model of an export: FP32 weights decoded from codes, scales and BF16.

    Returns:
        (a transformers causal LM in eval mode, the header).

    Raises:
        ExportError: see :func:`read_export`; or tensors that do not fill the model.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    header, data = read_export(path)
    cfg = dict(header["config"])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {e["name"]: decode_tensor(e, data) for e in header["tensors"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (header["tied_embedding"] and m == "lm_head.weight")]
    if missing or unexpected:
        raise ExportError(
            f"{path}: tensors do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.tie_weights()
    return model.eval(), header
