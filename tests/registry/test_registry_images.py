"""Images named by examples (F031): local paths become stored images named by digest."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from registry_testkit import make_registry

from akka_optimize.cli.registry.commands import with_images
from akka_optimize.db.models.registry import RegistryImage
from akka_optimize.errors import InvalidRequest
from akka_optimize.registry.datasets import (
    dir_uploader,
    local_image_paths,
    push_image,
    rewrite_images,
    zip_uploader,
)
from akka_optimize.store import content_key

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


def _rows(path: str) -> list[dict]:
    part = {"type": "image", "image": path}
    url = {"type": "image_url", "image_url": {"url": path}}
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}
    return [
        {"messages": [{"role": "user", "content": [part, remote]}]},
        {"messages": [{"role": "user", "content": [url]}]},
    ]


def test_local_image_paths_become_digests_and_blobs(tmp_path: Path):
    db, store = make_registry(tmp_path)
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "cat.png").write_bytes(PNG)
    rows = _rows("img/cat.png")
    assert local_image_paths(rows) == [(0, "img/cat.png"), (1, "img/cat.png")]
    digest = "sha256:" + hashlib.sha256(PNG).hexdigest()
    with db.session() as s:
        done = rewrite_images(rows, dir_uploader(s, store, tmp_path), "train.jsonl")
        assert s.get(RegistryImage, digest).media_type == "image/png"
    assert [d for _, _, d in done] == [digest, digest]
    assert rows[0]["messages"][0]["content"][0]["image"] == digest
    assert rows[0]["messages"][0]["content"][1]["image_url"]["url"].startswith("https://")
    assert rows[1]["messages"][0]["content"][0]["image_url"]["url"] == digest
    assert store.get_bytes(content_key(digest.removeprefix("sha256:"))) == PNG
    db.dispose()


def test_a_missing_image_names_the_example_and_the_path(tmp_path: Path):
    db, store = make_registry(tmp_path)
    with db.session() as s, pytest.raises(InvalidRequest) as info:
        rewrite_images(_rows("nope.png"), zip_uploader(s, store, {}, "train.jsonl"), "d.zip")
    assert "example 1" in info.value.message and "'nope.png'" in info.value.message
    assert store.list("sha256") == []
    db.dispose()


def test_push_image_refuses_a_non_image(tmp_path: Path):
    db, store = make_registry(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with db.session() as s, pytest.raises(InvalidRequest, match="is not an image"):
        push_image(s, store, tmp_path / "notes.txt")
    db.dispose()


def test_cli_packs_a_jsonl_naming_local_images_into_a_zip(tmp_path: Path):
    (tmp_path / "cat.png").write_bytes(PNG)
    f = tmp_path / "train.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in _rows("./cat.png")))
    out = with_images(f, tmp_path)
    assert out.suffix == ".zip"
    with zipfile.ZipFile(out) as zf:
        assert sorted(zf.namelist()) == ["cat.png", "train.jsonl"]
        assert zf.read("cat.png") == PNG
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"messages": []}\n')
    assert with_images(plain, tmp_path) == plain
