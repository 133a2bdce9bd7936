"""Prepared token rows: written, loaded as given, refused on another tokenizer or a short maxSeqLength."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from akka_optimize.data.masks import prepare_examples
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.prepared.rows import load_prepared, main, write_prepared
from akka_optimize.data.rows import parse_row
from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest


def rows():
    return [
        parse_row(
            {
                "messages": [
                    {"role": "user", "content": f"q{i}"},
                    {"role": "assistant", "content": "a " * (i + 1)},
                ]
            },
            i + 1,
        )
        for i in range(4)
    ]


def test_round_trip_trains_as_given(tmp_path, smollm2_tokenizer):
    prep = prepare_examples(smollm2_tokenizer, rows(), LossPolicy(), 512)
    desc = write_prepared(tmp_path, prep.examples, smollm2_tokenizer)
    assert json.loads((tmp_path / "prepared.json").read_text()) == desc
    loaded = load_prepared(tmp_path, smollm2_tokenizer, 512)
    assert [e.input_ids for e in loaded] == [e.input_ids for e in prep.examples]
    assert [e.weights for e in loaded] == [e.weights for e in prep.examples]
    # F029: the run's supervised token count equals the sum of the masks
    masks = pq.read_table(tmp_path / desc["files"][0])["loss_mask"].to_pylist()
    assert (
        sum(e.supervised_tokens for e in loaded) == sum(map(sum, masks)) == desc["supervisedTokens"]
    )


def test_another_tokenizer_is_refused(
    tmp_path, smollm2_tokenizer, tools_tokenizer, smollm2_tokenizer_dir
):
    from transformers import AutoTokenizer

    prep = prepare_examples(smollm2_tokenizer, rows(), LossPolicy(), 512)
    write_prepared(tmp_path, prep.examples, smollm2_tokenizer)
    other = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    other.add_tokens(["<extra_token>"])
    with pytest.raises(InvalidRequest, match="another tokenizer") as info:
        load_prepared(tmp_path, other, 512)
    assert info.value.field == "config.dataset"
    with pytest.raises(InvalidRequest, match="another chat template"):
        load_prepared(tmp_path, tools_tokenizer, 512)


def test_max_seq_length_shorter_than_the_longest_row_is_refused(tmp_path, smollm2_tokenizer):
    prep = prepare_examples(smollm2_tokenizer, rows(), LossPolicy(), 512)
    desc = write_prepared(tmp_path, prep.examples, smollm2_tokenizer)
    with pytest.raises(
        InvalidRequest,
        match=f"shorter than the longest prepared row \\({desc['longestRow']} tokens\\)",
    ) as info:
        load_prepared(tmp_path, smollm2_tokenizer, desc["longestRow"] - 1)
    assert info.value.field == "config.maxSeqLength"
    assert len(load_prepared(tmp_path, smollm2_tokenizer, desc["longestRow"])) == 4


@pytest.mark.parametrize(
    ("ids", "mask", "mention"),
    [
        ([1, 2, 3], [0, 1], "same length"),
        ([1, 2, 3], [0, 2, 1], "0 or 1"),
        ([1, 2, 3], [1, 1, 1], "loss_mask\\[0\\] 0"),
        ([1, 2, 10**7], [0, 1, 1], "outside the vocabulary"),
    ],
)
def test_bad_prepared_rows_are_refused_naming_file_and_row(
    tmp_path, smollm2_tokenizer, ids, mask, mention
):
    write_prepared(tmp_path, [Example([1, 2], [0.0, 1.0], 1)], smollm2_tokenizer)
    table = pa.table({"input_ids": [[5, 6], ids], "loss_mask": [[0, 1], mask]})
    pq.write_table(table, tmp_path / "rows-00000.parquet")
    with pytest.raises(InvalidRequest, match=mention) as info:
        load_prepared(tmp_path, smollm2_tokenizer, 512)
    assert "rows-00000.parquet: row 2" in info.value.message


def test_the_script_writes_a_descriptor_from_jsonl(
    tmp_path, smollm2_tokenizer, smollm2_tokenizer_dir, capsys
):
    src = tmp_path / "train.jsonl"
    src.write_text(
        "\n".join(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) for i in range(3))
    )
    assert (
        main([str(src), "--tokenizer", str(smollm2_tokenizer_dir), "--out", str(tmp_path / "out")])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["rows"] == 3
    assert len(load_prepared(tmp_path / "out", smollm2_tokenizer, 64)) == 3
