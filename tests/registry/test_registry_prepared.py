"""Prepared token rows in the registry (issue 16 item 8; F029, F030): a ZIP of
``prepared.json`` and Parquet rows registers the tokens and masks exactly as given, the
same tokens give the same version, and a bad row or a descriptor that lies registers
nothing."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from registry_testkit import blob_keys, make_registry

from akka_optimize.data.prepared.rows import write_prepared
from akka_optimize.data.types import Example
from akka_optimize.errors import InvalidRequest
from akka_optimize.registry import (
    list_names,
    load_dataset_rows,
    load_prepared_examples,
    register_dataset,
)


@pytest.fixture
def reg(tmp_path):
    db, store = make_registry(tmp_path)
    yield db, store
    db.dispose()


def examples() -> list[Example]:
    return [
        Example([1, 5, 9, 2], [0.0, 0.0, 1.0, 1.0], 1),
        Example([1, 7, 3], [0.0, 1.0, 0.0], 2),
        Example([1, 4, 4, 4, 2], [0.0, 0.0, 0.0, 1.0, 1.0], 3),
    ]


def zip_folder(folder: Path, dest: Path, rename: dict[str, str] | None = None) -> Path:
    """The folder as the CLI sends it (``prepared.json`` and the files it lists)."""
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(folder.iterdir()):
            zf.write(p, (rename or {}).get(p.name, p.name))
    return dest


def test_prepared_rows_register_as_given_and_the_same_tokens_are_the_same_version(
    reg, tmp_path, smollm2_tokenizer
):
    db, store = reg
    desc = write_prepared(tmp_path / "a", examples(), smollm2_tokenizer)
    with db.session() as s:
        rv, created = register_dataset(
            s, store, "t/tok", zip_folder(tmp_path / "a", tmp_path / "a.zip")
        )
    assert created and rv.metadata["format"] == "prepared" and rv.metadata["rows"] == 3
    info = rv.metadata["prepared"]
    assert (info["rows"], info["longestRow"], info["supervisedTokens"]) == (3, 5, 5)
    assert info["tokenizer"]["sha256"] == desc["tokenizer"]["sha256"]
    header, got = load_prepared_examples(store, rv)
    assert header["supervisedTokens"] == 5
    assert [(e.input_ids, e.weights, e.row) for e in got] == [
        (e.input_ids, e.weights, e.row) for e in examples()
    ]
    # the same tokens, written again in two files, are the same version
    other = tmp_path / "b"
    write_prepared(other, examples(), smollm2_tokenizer)
    t = pq.read_table(other / "rows-00000.parquet")
    pq.write_table(t.slice(0, 1), other / "rows-00000.parquet")
    pq.write_table(t.slice(1), other / "rows-00001.parquet")
    d = json.loads((other / "prepared.json").read_text())
    d["files"] = ["rows-00000.parquet", "rows-00001.parquet"]
    (other / "prepared.json").write_text(json.dumps(d))
    with db.session() as s:
        again, created = register_dataset(s, store, "t/tok", zip_folder(other, tmp_path / "b.zip"))
    assert not created and again.pinned == rv.pinned
    # conversations consumers refuse it with a sentence, never a KeyError
    with pytest.raises(InvalidRequest, match="prepared token rows") as exc:
        load_dataset_rows(store, rv)
    assert exc.value.code == "prepared_rows"


@pytest.mark.parametrize(
    ("change", "mention"),
    [
        (lambda d: d | {"rows": 4}, "prepared.json: rows is 4, but the files hold 3"),
        (lambda d: d | {"supervisedTokens": 9}, "supervisedTokens is 9"),
        (lambda d: d | {"files": ["rows-00000.parquet", "gone.parquet"]}, "gone.parquet"),
        (lambda d: d | {"format": "other"}, "format must be"),
        (lambda d: {k: v for k, v in d.items() if k != "tokenizer"}, "has no tokenizer"),
    ],
)
def test_a_descriptor_that_lies_registers_nothing(
    reg, tmp_path, smollm2_tokenizer, change, mention
):
    db, store = reg
    folder = tmp_path / "p"
    desc = write_prepared(folder, examples(), smollm2_tokenizer)
    (folder / "prepared.json").write_text(json.dumps(change(desc)))
    with db.session() as s, pytest.raises(InvalidRequest, match=mention):
        register_dataset(s, store, "t/tok", zip_folder(folder, tmp_path / "p.zip"))
    with db.session() as s:
        assert list_names(s, "dataset") == []
    assert blob_keys(store) == []


@pytest.mark.parametrize(
    ("ids", "mask", "mention"),
    [
        ([1, 2, 3], [0, 0, 0], "trains nothing"),
        ([1, 2, 3], [1, 1, 1], "loss_mask\\[0\\] 0"),
        ([1, 2, 10**7], [0, 1, 1], "outside the vocabulary"),
        ([1, 2, 3], [0, 1], "same length"),
    ],
)
def test_a_bad_row_registers_nothing_and_names_file_and_row(
    reg, tmp_path, smollm2_tokenizer, ids, mask, mention
):
    db, store = reg
    folder = tmp_path / "p"
    write_prepared(folder, examples()[:1], smollm2_tokenizer)
    table = pa.table({"input_ids": [[5, 6], ids], "loss_mask": [[0, 1], mask]})
    pq.write_table(table, folder / "rows-00000.parquet")
    d = json.loads((folder / "prepared.json").read_text())
    for key in ("rows", "longestRow", "supervisedTokens"):
        d.pop(key)
    d["longestRow"] = 3
    (folder / "prepared.json").write_text(json.dumps(d))
    with db.session() as s, pytest.raises(InvalidRequest, match=mention) as exc:
        register_dataset(s, store, "t/tok", zip_folder(folder, tmp_path / "p.zip"))
    assert "rows-00000.parquet: row 2" in exc.value.message
    assert blob_keys(store) == []
