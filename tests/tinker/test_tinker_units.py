"""The Tinker protocol's parts without a service: the hand-written protobuf codec against
the SDK's own generated classes, seq_id ordering and retries, datum checks, LoRA options."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest

pb = pytest.importorskip("tinker.proto.tinker_public_pb2")

from akka_optimize.errors import InvalidRequest  # noqa: E402
from akka_optimize.tinker.broker import Broker, Model  # noqa: E402
from akka_optimize.tinker.datums import (  # noqa: E402
    DatumError,
    adam_params,
    non_finite,
    non_finite_config,
    to_passes,
)
from akka_optimize.tinker.kind import lora_config, lora_targets  # noqa: E402
from akka_optimize.tinker.wire import (  # noqa: E402
    WireError,
    decode_forward_backward,
    encode_forward_backward_output,
    encode_sample_response,
)


def _tensor(values: list, dtype: int) -> pb.Tensor:
    np_dtype = np.int64 if dtype == pb.DTYPE_INT64 else np.float32
    t = pb.Tensor(dtype=dtype, shape=[len(values)])
    t.dense = np.asarray(values, dtype=np_dtype).tobytes()
    return t


def test_request_decodes_as_the_sdk_encodes_it() -> None:
    req = pb.ForwardBackwardRequest(model_id="s:train:0", seq_id=7, loss_fn="ppo")
    req.loss_fn_config["clip_low_threshold"] = 0.7
    d = req.data.add()
    d.model_input.add().encoded_text.tokens = np.asarray([5, 6, 7], np.int32).tobytes()
    d.loss_fn_inputs["target_tokens"].CopyFrom(_tensor([6, 7, 8], pb.DTYPE_INT64))
    d.loss_fn_inputs["advantages"].CopyFrom(_tensor([0.5, -1.0, 2.0], pb.DTYPE_FLOAT32))
    sparse = req.data.add()
    sparse.model_input.add().encoded_text.tokens = np.asarray([1, 2], np.int32).tobytes()
    w = sparse.loss_fn_inputs["weights"]
    w.dtype, w.shape[:] = pb.DTYPE_FLOAT32, [1, 2]
    w.sparse_csr.values = np.asarray([3.0], np.float32).tobytes()
    w.sparse_csr.crow_indices = np.asarray([0, 1], np.int64).tobytes()
    w.sparse_csr.col_indices = np.asarray([1], np.int64).tobytes()
    out = decode_forward_backward(req.SerializeToString())
    assert (out["model_id"], out["seq_id"], out["loss_fn"]) == ("s:train:0", 7, "ppo")
    assert out["loss_fn_config"] == {"clip_low_threshold": pytest.approx(0.7)}
    assert out["data"][0] == {
        "tokens": [5, 6, 7],
        "inputs": {"target_tokens": [6, 7, 8], "advantages": [0.5, -1.0, 2.0]},
    }
    assert out["data"][1]["inputs"]["weights"] == [0.0, 3.0]


def test_a_body_cut_short_is_refused_naming_where() -> None:
    """Issue 48 item 6: a ForwardBackwardRequest cut short was decoded as a shorter one."""
    req = pb.ForwardBackwardRequest(model_id="s:train:0", seq_id=7, loss_fn="cross_entropy")
    d = req.data.add()
    d.model_input.add().encoded_text.tokens = np.asarray([5, 6, 7], np.int32).tobytes()
    d.loss_fn_inputs["target_tokens"].CopyFrom(_tensor([6, 7, 8], pb.DTYPE_INT64))
    whole = req.SerializeToString()
    for cut in (len(whole) - 1, len(whole) // 2, 3):
        with pytest.raises(WireError, match="cut short inside field"):
            decode_forward_backward(whole[:cut])


def test_outputs_parse_with_the_sdk() -> None:
    from tinker.proto.response_conv import (
        deserialize_forward_backward_output,
        deserialize_sample_response,
    )

    raw = encode_forward_backward_output({"logprobs": [[-1.5, -0.25], [-3.0]]}, {"loss:sum": 4.75})
    out = deserialize_forward_backward_output(raw)
    assert out.metrics == {"loss:sum": 4.75}
    assert [o["logprobs"].tolist() for o in out.loss_fn_outputs] == [[-1.5, -0.25], [-3.0]]
    seqs = [
        {"tokens": [4, 5], "logprobs": [-0.5, -0.75], "stop_reason": "stop"},
        {"tokens": [9], "logprobs": [-2.0], "stop_reason": "length"},
    ]
    sample = deserialize_sample_response(encode_sample_response(seqs, [None, -1.0]))
    assert [s.tokens for s in sample.sequences] == [[4, 5], [9]]
    assert [s.stop_reason for s in sample.sequences] == ["stop", "length"]
    assert sample.sequences[0].logprobs == [-0.5, -0.75]
    assert math.isnan(sample.prompt_logprobs_np[0]) and sample.prompt_logprobs_np[1] == -1.0


def test_calls_reach_the_worker_in_seq_order_and_retries_are_not_applied_twice() -> None:
    async def scenario() -> tuple[list[int], bool]:
        b = Broker()
        m = Model("s:train:0", "run", "demo", "base", 4, {})
        futs = {seq: b.submit(m, seq, "op", {"seq": seq}) for seq in (3, 1)}
        again = b.submit(m, 3, "op", {"seq": 3}) is futs[3]
        b.submit(m, 2, "op", {"seq": 2})
        got = []
        while (item := await b.next_item(m, timeout=0.01)) is not None:
            got.append(item["body"]["seq"])
        return got, again

    order, same = asyncio.run(scenario())
    assert order == [1, 2, 3] and same


def _wire(tokens: list[int], **inputs: list) -> dict:
    return {"tokens": tokens, "inputs": inputs}


@pytest.mark.parametrize(
    ("datum", "loss_fn", "words"),
    [
        (_wire([1, 2], target_tokens=[2, 3], weights=[1.0]), "cross_entropy", "weights has 1"),
        (_wire([1, 2], target_tokens=[2, 99], weights=[1, 1]), "cross_entropy", "vocabulary"),
        (_wire([1, 2], target_tokens=[5, 3]), "cross_entropy", "target_tokens[0]"),
        (_wire([1, 2], target_tokens=[2, 3]), "importance_sampling", "logprobs is missing"),
        (_wire([1, 2], target_tokens=[2, 3]), "stable_reinforce", "loss_fn 'stable_reinforce'"),
        (
            _wire([1, 2], target_tokens=[2, 3], logprobs=[-1, -1], advantages=[1, 1]),
            "gspo",
            "sequence_ratio_mask is missing",
        ),
        (
            _wire(
                [1, 2],
                target_tokens=[2, 3],
                logprobs=[-1, -1],
                advantages=[1, 1],
                sequence_ratio_mask=[0, 0],
            ),
            "gspo",
            "sequence_ratio_mask marks no token",
        ),
    ],
)
def test_datums_are_refused_naming_the_field(datum: dict, loss_fn: str, words: str) -> None:
    with pytest.raises(DatumError, match=words.replace("[", r"\[").replace("]", r"\]")):
        to_passes([datum], loss_fn, {}, vocab=50)


def test_a_datum_becomes_one_pass_scoring_every_target() -> None:
    passes, inputs = to_passes(
        [_wire([1, 2, 3], target_tokens=[2, 3, 4], weights=[0, 1, 1])], "cross_entropy", {}, 50
    )
    assert passes[0].input_ids == [1, 2, 3, 4] and passes[0].weights == [0.0, 1.0, 1.0, 1.0]
    assert inputs[0]["weights"] == [0.0, 0.0, 1.0, 1.0]
    assert "weights[1]" in non_finite([_wire([1], weights=[1.0, math.nan])])


def test_lora_options_map_to_targets_or_are_refused() -> None:
    entry = SimpleNamespace(
        repository="o/m", family="llama", lora_target_modules=("q_proj", "v_proj", "up_proj")
    )
    assert lora_targets(entry, {"train_mlp": False, "train_unembed": False}) == (
        "q_proj",
        "v_proj",
    )
    assert lora_targets(entry, {}) == ("q_proj", "v_proj", "up_proj", "lm_head")
    regex = SimpleNamespace(repository="o/r", family="gemma", lora_target_modules=".*proj")
    with pytest.raises(InvalidRequest, match="lora_config.train_mlp"):
        lora_targets(regex, {"train_mlp": False})


def test_a_checkpoint_ttl_expires_it_and_bad_ttls_are_refused() -> None:
    from datetime import UTC, datetime, timedelta

    from akka_optimize.db.models.jobs import Run
    from akka_optimize.tinker.kind import expired, record_checkpoint, saved_key, ttl_refusal
    from akka_optimize.tinker.rest import checkpoints

    run = Run(id="r1", created_at=datetime.now(UTC), results={"tinkerModelId": "s:train:0"})
    run.results = {
        **run.results,
        "tinkerSaves": {"weights/a": "runs/r1/tinker/weights/a", "sampler_weights/b": "demo/m:v1"},
        "tinkerSamplerKeys": {"b": "runs/r1/tinker/sampler_weights/b"},
    }
    record_checkpoint(run, "weights/a", "runs/r1/tinker/weights/a", 10, ttl=3600)
    record_checkpoint(run, "sampler_weights/b", "runs/r1/tinker/sampler_weights/b", 20)
    soon, later = (
        datetime.now(UTC) + timedelta(seconds=3590),
        datetime.now(UTC) + timedelta(hours=2),
    )
    assert not expired(run, "weights/a", soon) and expired(run, "weights/a", later)
    assert saved_key(run, "weights/a", soon) == "runs/r1/tinker/weights/a"
    assert saved_key(run, "weights/a", later) is None  # its path stops resolving
    assert saved_key(run, "sampler_weights/b", later) == "runs/r1/tinker/sampler_weights/b"
    assert [c["checkpoint_id"] for c in checkpoints(run, soon)] == [
        "weights/a",
        "sampler_weights/b",
    ]
    assert [c["tinker_path"] for c in checkpoints(run, later)] == [
        "tinker://s:train:0/sampler_weights/b"
    ]
    assert ttl_refusal(None) is None and ttl_refusal(3600) is None
    for bad in (5, 10**10, True, "3600", 3600.5):
        assert "ttl_seconds" in (ttl_refusal(bad) or ""), bad


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({"rank": "abc"}, "lora_config.rank", "'abc'; give a rank from 1 to 512"),
        ({"rank": [1]}, "lora_config.rank", "[1]; give a rank from 1 to 512"),
        ({"rank": True}, "lora_config.rank", "True; give a rank"),
        ({"rank": 0}, "lora_config.rank", "0; give a rank"),
        ("rank 4", "lora_config", "'rank 4'; give an object"),
        ({"rank": 4, "seed": 1.5}, "lora_config.seed", "1.5; give a whole number"),
        ({"rank": 4, "train_attn": "maybe"}, "lora_config.train_attn", "'maybe'; give true"),
    ],
)
def test_lora_configs_are_refused_naming_the_field(given: object, field: str, words: str) -> None:
    """Issue 48 items 5 and 6: these were a 500 (``int("abc")``, ``dict("rank 4")``) or
    taken (``"maybe"`` read as true)."""
    with pytest.raises(InvalidRequest) as err:
        lora_config(given)
    assert err.value.field == field and words in err.value.message


def test_a_lora_config_keeps_its_options_with_defaults() -> None:
    assert lora_config({"rank": 8, "train_mlp": False}) == {
        "rank": 8,
        "seed": 0,
        "train_mlp": False,
    }


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"learning_rate": "x"}, "adam_params.learning_rate is 'x'; give a finite number ≥ 0."),
        ({"beta1": 1.0}, "adam_params.beta1 is 1.0; give a number from 0 up to"),
        ({"beta2": 1.5}, "adam_params.beta2 is 1.5; give a number from 0 up to"),
        ({"eps": 0}, "adam_params.eps is 0; give a finite number ≥ 1.2e-38"),
        ({"eps": -1e-8}, "adam_params.eps is -1e-08; give a finite number ≥ 1.2e-38"),
        # rounds to 0 in the float32 update: 0/0 for a weight with no gradient (NaN)
        ({"eps": 4.4e-276}, "adam_params.eps is 4.4e-276; give a finite number ≥ 1.2e-38"),
        ({"weight_decay": True}, "adam_params.weight_decay is True;"),
        ({"learning_rate": math.nan}, "adam_params.learning_rate is nan;"),
        ({"momentum": 0.9}, "adam_params.momentum is not an AdamParams field."),
        ("fast", "adam_params is 'fast'; give an AdamParams object."),
    ],
)
def test_adam_params_are_refused_naming_the_field(given: object, words: str) -> None:
    """Issue 48 items 5 and 6: ``"x"`` failed as Python's ValueError text; β₁ ≥ 1 and ε ≤ 0
    were applied."""
    with pytest.raises(DatumError) as err:
        adam_params(given)
    assert str(err.value).startswith(words)


def test_adam_params_fill_the_defaults() -> None:
    got = adam_params({"learning_rate": 1e-3, "beta1": 0})
    assert got["learning_rate"] == 1e-3 and got["beta1"] == 0.0 and got["eps"] == 1e-12
    assert (
        non_finite_config({"beta": math.nan}) == "loss_fn_config.beta is nan; give a finite number."
    )
    assert non_finite_config({"beta": 0.1}) is None
