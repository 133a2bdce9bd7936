"""Datasets in the registry (issue 3 item 2, F039, F040, F032): versions by canonical
examples, line-numbered refusals, concurrency, ZIPs and limits."""

from __future__ import annotations

import json
import threading
import zipfile
from pathlib import Path

import pytest
from registry_testkit import blob_keys, make_registry, row, write_jsonl

from akka_optimize.deployment import RegistryLimits
from akka_optimize.errors import InvalidRequest, NotFound, TooLarge
from akka_optimize.registry import (
    list_names,
    list_versions,
    load_dataset_rows,
    register_dataset,
    resolve,
    set_alias,
)

CASES = Path(__file__).resolve().parents[1] / "cases"


@pytest.fixture
def reg(tmp_path):
    db, store = make_registry(tmp_path)
    yield db, store
    db.dispose()


BAD = [json.loads(x) for x in (CASES / "conversations-bad.jsonl").read_text().splitlines() if x]


def test_same_examples_give_the_same_version_new_content_the_next(reg, tmp_path):
    db, store = reg
    rows = [row("a"), row("b")]
    f1 = write_jsonl(tmp_path / "a.jsonl", rows)
    # Same examples written with other spacing and key order.
    f2 = write_jsonl(tmp_path / "b.jsonl", rows, indent=None, separators=(", ", ": "))
    f2.write_text("\n" + f2.read_text().replace('"messages"', ' "messages"'))
    with db.session() as s:
        v1, created1 = register_dataset(s, store, "triage/train", f1)
    with db.session() as s:
        again, created2 = register_dataset(s, store, "Triage/Train", f2)
    assert (created1, created2) == (True, False)
    assert again.pinned == v1.pinned and v1.version == 1
    f3 = write_jsonl(tmp_path / "c.jsonl", [row("a"), row("b", "changed")])
    with db.session() as s:
        v2, created3 = register_dataset(s, store, "triage/train", f3)
        assert created3 and v2.version == 2 and v2.digest != v1.digest
        assert resolve(s, "dataset", "triage/train").version == 2
        assert resolve(s, "dataset", f"triage/train@{v1.digest}").version == 1
        assert resolve(s, "dataset", "train", "triage").pinned == v2.pinned
        assert [v.version for v in list_versions(s, "dataset", "triage", "train")] == [1, 2]
        assert list_names(s, "dataset")[0]["latest"] == "v2"
    assert v1.pinned == f"triage/train:v1@{v1.digest}"
    assert load_dataset_rows(store, v1) == [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "ok"}]}
        for q in ("a", "b")
    ]


def test_alias_moves_without_changing_a_pinned_reference(reg, tmp_path):
    db, store = reg
    with db.session() as s:
        v1, _ = register_dataset(
            s, store, "t/d", write_jsonl(tmp_path / "1.jsonl", [row("1")]), alias="candidate"
        )
        v2, _ = register_dataset(s, store, "t/d", write_jsonl(tmp_path / "2.jsonl", [row("2")]))
        pinned = resolve(s, "dataset", "t/d:candidate").pinned
        set_alias(s, "dataset", "t", "d", "candidate", "v2")
        assert resolve(s, "dataset", "t/d:candidate").version == 2
        assert resolve(s, "dataset", pinned).version == 1
        with pytest.raises(NotFound, match="has no version v3; it has v1, v2"):
            resolve(s, "dataset", "t/d:v3")
        with pytest.raises(NotFound, match="no alias champion"):
            resolve(s, "dataset", "t/d:champion")
        with pytest.raises(NotFound, match="not in the registry"):
            resolve(s, "dataset", "t/other")
        with pytest.raises(InvalidRequest, match="reserved"):
            set_alias(s, "dataset", "t", "d", "latest", 1)
        with pytest.raises(NotFound):
            resolve(s, "dataset", f"t/d:v2@{v1.digest}")


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_bad_row_registers_nothing_and_names_its_line(reg, tmp_path, case):
    db, store = reg
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(row("fine")) + "\n" + json.dumps(case["row"]) + "\n")
    with db.session() as s, pytest.raises(InvalidRequest) as info:
        register_dataset(s, store, "t/bad", f)
    msg = info.value.message
    assert "line 2" in msg
    for needle in case["error_mentions"]:
        assert needle in msg
    with db.session() as s:
        assert list_names(s, "dataset") == []
    assert blob_keys(store) == []


def test_broken_line_3_and_mixed_line_5_are_both_listed(reg, tmp_path):
    db, store = reg
    lines = [
        json.dumps(row("1")),
        json.dumps(row("2")),
        '{"messages": [',
        json.dumps(row("4")),
        json.dumps({**row("5"), "prompt": "p", "completion": "c"}),
    ]
    f = tmp_path / "mixed.jsonl"
    f.write_text("\n".join(lines) + "\n")
    with db.session() as s, pytest.raises(InvalidRequest) as info:
        register_dataset(s, store, "t/mixed", f)
    assert "line 3: " in info.value.message and "line 5: " in info.value.message
    with db.session() as s:
        assert list_names(s, "dataset") == []


def test_two_concurrent_identical_registrations_create_one_version(reg, tmp_path):
    db, store = reg
    f = write_jsonl(tmp_path / "same.jsonl", [row(str(i)) for i in range(50)])
    results, errors = [], []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        try:
            with db.session() as s:
                rv, created = register_dataset(s, store, "t/race", f)
                results.append((rv.pinned, created))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({p for p, _ in results}) == 1
    assert sorted(c for _, c in results) == [False, False, False, True]
    with db.session() as s:
        assert len(list_versions(s, "dataset", "t", "race")) == 1


def test_size_limit_names_the_limit_and_stores_nothing(reg, tmp_path):
    db, store = reg
    f = write_jsonl(tmp_path / "big.jsonl", [row("x" * 500) for _ in range(10)])
    with db.session() as s, pytest.raises(TooLarge) as info:
        register_dataset(s, store, "t/big", f, limits=RegistryLimits(uploadBytes=1024))
    assert "the dataset limit is 1,024 bytes" in info.value.message
    assert "uploadBytes" in info.value.message
    assert blob_keys(store) == []


def test_zip_bomb_is_refused_after_extraction_and_leaves_nothing(reg, tmp_path):
    db, store = reg
    z = tmp_path / "bomb.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("train.jsonl", json.dumps(row("a")) + "\n")
        zf.writestr("padding.png", b"\0" * (4 * 1024 * 1024))
    assert z.stat().st_size < 64 * 1024
    with db.session() as s, pytest.raises(TooLarge) as info:
        register_dataset(s, store, "t/bomb", z, limits=RegistryLimits(uploadBytes=1024**2))
    assert "expand past" in info.value.message and "1 MiB" in info.value.message
    with db.session() as s:
        assert list_names(s, "dataset") == []
    assert blob_keys(store) == []


def test_zip_of_jsonl_registers_its_examples(reg, tmp_path):
    db, store = reg
    z = tmp_path / "d.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("data/train.jsonl", json.dumps(row("q")) + "\n")
    with db.session() as s:
        rv, _ = register_dataset(s, store, "t/z", z)
    assert rv.metadata["format"] == "zip" and rv.metadata["rows"] == 1
    assert load_dataset_rows(store, rv)[0]["messages"][0]["content"] == "q"
    with zipfile.ZipFile(tmp_path / "escape.zip", "w") as zf:
        zf.writestr("../train.jsonl", json.dumps(row("q")) + "\n")
    with db.session() as s, pytest.raises(InvalidRequest, match="escapes"):
        register_dataset(s, store, "t/z", tmp_path / "escape.zip")
