"""The three protobuf messages of the Tinker protocol, encoded and decoded by hand.

The SDK sends ``ForwardBackwardRequest`` as protobuf and accepts ``ForwardBackwardOutput``
and ``SampleResponse`` only as protobuf (TINKER-PROTOCOL.md §5, package ``tinker_public``,
proto3). The service needs no protobuf library: these few messages are read and written
with the wire format's two rules (a varint key ``field << 3 | wire_type``; wire type 0 a
varint, 1 eight bytes, 2 a length-prefixed payload, 5 four bytes). Tensors are raw
little-endian arrays (tokens int32, ``dense``/``values`` in their dtype, CSR indices int64,
``BatchedTensor.offsets`` int64 *byte* offsets). The tests check every message against the
SDK's own generated classes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

DTYPES = {1: np.float32, 2: np.int64, 3: np.int32}
"""``tinker_public.DType`` values this codec reads (4, bfloat16, is refused)."""
FLOAT32, INT64, INT32 = 1, 2, 3


class WireError(ValueError):
    """A message that does not decode; the text names the field."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out, shift = 0, 0
    while True:
        if i >= len(buf):
            raise WireError("the protobuf body ends inside a varint")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field of a serialized message; value
    is an int (types 0, 1, 5 as raw unsigned) or the payload bytes (type 2)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wtype = key >> 3, key & 7
        if wtype == 0:
            value, i = _varint(buf, i)
        elif wtype in (1, 5):
            size = 8 if wtype == 1 else 4
            if i + size > len(buf):
                raise WireError(f"the protobuf body is cut short inside field {number}")
            value, i = struct.unpack_from("<Q" if size == 8 else "<I", buf, i)[0], i + size
        elif wtype == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise WireError(f"the protobuf body is cut short inside field {number}")
            value, i = bytes(buf[i : i + n]), i + n
        else:
            raise WireError(f"unsupported protobuf wire type {wtype} (field {number})")
        yield number, wtype, value


def _ints(wtype: int, value: Any) -> list[int]:
    """A repeated int64 field's values (packed or one unpacked value)."""
    if wtype == 0:
        return [value - (1 << 64) if value >> 63 else value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v - (1 << 64) if v >> 63 else v)
    return out


def _map_entry(buf: bytes) -> tuple[str, Any]:
    key, val = "", b""
    for n, wt, v in fields(buf):
        if n == 1:
            key = v.decode()
        elif n == 2:
            val = struct.unpack("<d", struct.pack("<Q", v))[0] if wt == 1 else v
    return key, val


def _tensor(buf: bytes, where: str) -> np.ndarray:
    """A ``Tensor`` as a dense numpy array of its shape."""
    dense, csr, dtype, shape = None, None, 0, []
    for n, wt, v in fields(buf):
        if n == 1:
            dense = v
        elif n == 2:
            csr = {k: val for k, _, val in fields(v)}
        elif n == 3:
            dtype = v
        elif n == 4:
            shape += _ints(wt, v)
    if dtype not in DTYPES:
        raise WireError(f"{where} has dtype {dtype}; the platform reads float32 and int64.")
    np_dtype = DTYPES[dtype]
    if csr is not None:
        values = np.frombuffer(csr.get(1, b""), dtype=np_dtype)
        crow = np.frombuffer(csr.get(2, b""), dtype=np.int64)
        col = np.frombuffer(csr.get(3, b""), dtype=np.int64)
        if len(shape) != 2 or len(crow) != shape[0] + 1:
            raise WireError(f"{where} is a sparse tensor whose shape {shape} does not fit.")
        out = np.zeros(shape, dtype=np_dtype)
        for r in range(shape[0]):
            out[r, col[crow[r] : crow[r + 1]]] = values[crow[r] : crow[r + 1]]
        return out
    arr = np.frombuffer(dense or b"", dtype=np_dtype)
    if shape and int(np.prod(shape)) != arr.size:
        raise WireError(f"{where} holds {arr.size} values but its shape is {shape}.")
    return arr.reshape(shape) if shape else arr


def _datum(buf: bytes, index: int) -> dict[str, Any]:
    tokens: list[int] = []
    inputs: dict[str, list] = {}
    for n, _, v in fields(buf):
        if n == 1:
            for cn, _, cv in fields(v):
                if cn != 1:
                    raise WireError(
                        f"data[{index}].model_input has an image or dmel chunk; the platform "
                        "trains on encoded_text chunks only."
                    )
                tok = dict((k, val) for k, _, val in fields(cv)).get(1, b"")
                tokens += np.frombuffer(tok, dtype=np.int32).tolist()
        elif n == 2:
            name, tensor = _map_entry(v)
            where = f"data[{index}].loss_fn_inputs.{name}"
            inputs[name] = _tensor(tensor, where).reshape(-1).tolist()
    return {"tokens": tokens, "inputs": inputs}


def decode_forward_backward(body: bytes) -> dict[str, Any]:
    """Decode a ``ForwardBackwardRequest``.

    Returns:
        ``{"model_id", "seq_id", "loss_fn", "forward_only", "loss_fn_config": {name:
        float}, "data": [{"tokens": [int], "inputs": {name: [number]}}]}``.

    Raises:
        WireError: the body is not such a message, or holds what the platform cannot train
            on (images, bfloat16 inputs); the text names the field.
    """
    out: dict[str, Any] = {
        "model_id": "",
        "seq_id": 0,
        "loss_fn": "",
        "forward_only": False,
        "loss_fn_config": {},
        "data": [],
    }
    try:
        for n, _, v in fields(body):
            if n == 1:
                out["model_id"] = v.decode()
            elif n == 2:
                out["seq_id"] = v
            elif n == 3:
                out["data"].append(_datum(v, len(out["data"])))
            elif n == 4:
                out["loss_fn"] = v.decode()
            elif n == 5:
                key, val = _map_entry(v)
                out["loss_fn_config"][key] = float(val)
            elif n == 6:
                out["forward_only"] = bool(v)
    except WireError:
        raise
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as exc:
        raise WireError(
            f"the forward_backward body is not a ForwardBackwardRequest: {exc}"
        ) from exc
    return out


def _key(number: int, wtype: int) -> bytes:
    return _enc_varint(number << 3 | wtype)


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(payload)) + payload


def _double_map(number: int, values: dict[str, float]) -> bytes:
    out = b""
    for k, v in values.items():
        entry = _len(1, k.encode()) + _key(2, 1) + struct.pack("<d", float(v))
        out += _len(number, entry)
    return out


def _batched(arrays: list[np.ndarray], dtype: int) -> bytes:
    np_dtype = DTYPES[dtype]
    parts = [np.asarray(a, dtype=np_dtype).reshape(-1) for a in arrays]
    offsets = np.cumsum([0] + [p.nbytes for p in parts]).astype(np.int64)
    data = b"".join(p.tobytes() for p in parts)
    return _len(1, data) + _len(2, offsets.tobytes()) + _key(3, 0) + _enc_varint(dtype)


def encode_forward_backward_output(
    outputs: dict[str, list[list[float]]], metrics: dict[str, float]
) -> bytes:
    """A ``ForwardBackwardOutput``: one ``ArrayRecord`` whose fields (``logprobs``,
    ``elementwise_loss``) hold one float32 vector per datum, and ``metrics`` whose keys are
    ``name:reduction``."""
    n = len(next(iter(outputs.values()))) if outputs else 0
    record = _len(1, b"ArrayRecord")
    for name, per_datum in outputs.items():
        entry = _len(1, name.encode()) + _len(2, _batched(per_datum, FLOAT32))
        record += _len(2, entry)
    record += _key(3, 0) + _enc_varint(n)
    return _len(1, b"ArrayRecord") + _len(2, record) + _double_map(3, metrics)


def encode_sample_response(
    sequences: list[dict[str, Any]], prompt_logprobs: list[float] | None = None
) -> bytes:
    """A ``SampleResponse``: per sequence ``tokens`` (int32), ``logprobs`` (float32) and
    ``stop_reason`` (``stop`` → 0, ``length`` → 1); ``prompt_logprobs`` float32 with NaN
    where a position has none."""
    out = b""
    for seq in sequences:
        body = b""
        if seq["stop_reason"] == "length":
            body += _key(1, 0) + _enc_varint(1)
        body += _len(2, np.asarray(seq["tokens"], dtype=np.int32).tobytes())
        body += _len(3, np.asarray(seq["logprobs"], dtype=np.float32).tobytes())
        out += _len(1, body)
    if prompt_logprobs is not None:
        vals = [float("nan") if v is None else v for v in prompt_logprobs]
        out += _len(2, np.asarray(vals, dtype=np.float32).tobytes())
    return out
