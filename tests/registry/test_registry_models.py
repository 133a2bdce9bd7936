"""Bundles and models in the registry (issue 3 items 3-4; F041, F042, F043-F045, F047-F049)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from registry_testkit import blob_keys, make_registry

from akka_optimize.deployment import RegistryLimits
from akka_optimize.errors import Conflict, InvalidRequest, TooLarge
from akka_optimize.registry import (
    annotate,
    download_bundle,
    download_model_files,
    list_versions,
    register_adapter,
    register_base_model,
    register_bundle,
    resolve,
)


@pytest.fixture
def reg(tmp_path):
    db, store = make_registry(tmp_path)
    yield db, store
    db.dispose()


def _bundle(root: Path, text: str = "def compute_score(x):\n    return 1.0\n") -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "reward.py").write_text(text)
    (root / "lib" / "util.py").write_text("X = 1\n")
    return root


def _tar(members: dict[str, bytes], path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_same_bundle_files_give_the_same_version(reg, tmp_path):
    db, store = reg
    a = _bundle(tmp_path / "a")
    archive = _tar(
        {"reward.py": (a / "reward.py").read_bytes(), "lib/util.py": b"X = 1\n"},
        tmp_path / "a.tar.gz",
    )
    with db.session() as s:
        v1, c1 = register_bundle(s, store, "gsm8k/scoring", a)
        v1b, c1b = register_bundle(s, store, "gsm8k/scoring", archive)
        v2, c2 = register_bundle(s, store, "gsm8k/scoring", _bundle(tmp_path / "b", "# v2\n"))
    assert (c1, c1b, c2) == (True, False, True)
    assert v1b.pinned == v1.pinned and v2.version == 2
    assert v1.metadata == {"files": 2, "bytes": v1.size}
    out = download_bundle(store, v1, tmp_path / "out")
    assert (out / "reward.py").read_text() == (a / "reward.py").read_text()
    assert (out / "lib" / "util.py").read_text() == "X = 1\n"


@pytest.mark.parametrize("bad", ["../evil.py", "/etc/evil.py", "lib/../../evil.py"])
def test_bundle_path_escaping_the_root_is_refused_and_leaves_nothing(reg, tmp_path, bad):
    db, store = reg
    archive = _tar({"reward.py": b"ok\n", bad: b"import os\n"}, tmp_path / "evil.tar.gz")
    with db.session() as s, pytest.raises(InvalidRequest, match="escapes the bundle root"):
        register_bundle(s, store, "t/evil", archive)
    assert blob_keys(store) == []


def test_bundle_with_a_symlink_is_refused(reg, tmp_path):
    db, store = reg
    root = _bundle(tmp_path / "b")
    (root / "link.py").symlink_to("/etc/passwd")
    with db.session() as s, pytest.raises(InvalidRequest, match="link"):
        register_bundle(s, store, "t/link", root)
    path = tmp_path / "l.tar"
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo("x.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tf.addfile(info)
    with db.session() as s, pytest.raises(InvalidRequest, match="is a link"):
        register_bundle(s, store, "t/link", path)
    assert blob_keys(store) == []


def test_bundle_limits_name_the_limit(reg, tmp_path):
    db, store = reg
    many = {f"f{i}.py": b"" for i in range(11)}
    with db.session() as s, pytest.raises(TooLarge, match="11 files; the limit is 10"):
        register_bundle(
            s,
            store,
            "t/many",
            _tar(many, tmp_path / "m.tgz"),
            limits=RegistryLimits(bundleFiles=10),
        )
    # A gzip bomb: 8 MiB of zeros compresses to a few KiB.
    bomb = _tar({"zeros.bin": b"\0" * (8 * 1024**2)}, tmp_path / "bomb.tgz")
    assert bomb.stat().st_size < 64 * 1024
    with db.session() as s, pytest.raises(TooLarge, match="bundleExpandedBytes"):
        register_bundle(
            s, store, "t/bomb", bomb, limits=RegistryLimits(bundleExpandedBytes=1024**2)
        )
    with db.session() as s, pytest.raises(TooLarge, match="bundleCompressedBytes"):
        register_bundle(s, store, "t/bomb", bomb, limits=RegistryLimits(bundleCompressedBytes=100))
    assert blob_keys(store) == []


def _adapter(root: Path, weights: bytes = b"w1") -> Path:
    root.mkdir(parents=True)
    (root / "adapter_config.json").write_text('{"r": 8}')
    (root / "adapter_model.safetensors").write_bytes(weights)
    return root


def test_base_model_versions_per_commit_and_trained_versions_record_lineage(reg, tmp_path):
    db, store = reg
    with db.session() as s:
        b1 = register_base_model(s, "Qwen/Qwen3-0.6B", commit="c1", metadata={"family": "qwen3"})
        assert register_base_model(s, "qwen/qwen3-0.6B", commit="c1", metadata={}).pinned == (
            b1.pinned
        )
        b2 = register_base_model(s, "Qwen/Qwen3-0.6B", commit="c2", metadata={})
        assert (b1.repo, b1.version, b2.version) == ("qwen/qwen3-0.6b", 1, 2)
        assert b1.metadata["repository"] == "Qwen/Qwen3-0.6B" and b1.source == "base"
        m1 = register_adapter(
            s, store, "triage", "qwen3-0.6b", _adapter(tmp_path / "a1"),
            base_model=b1.pinned, run_id="run-1", metadata={"method": "sft"},
        )  # fmt: skip
        m2 = register_adapter(
            s, store, "Triage", "Qwen3-0.6B", _adapter(tmp_path / "a2", b"w2"),
            base_model="qwen/qwen3-0.6b", run_id="run-2", metadata={},
            parent_model=m1.pinned, alias="candidate",
        )  # fmt: skip
        assert [v.version for v in list_versions(s, "model", "triage", "qwen3-0.6b")] == [1, 2]
        got = resolve(s, "model", "triage/qwen3-0.6b:candidate")
        assert got.pinned == m2.pinned
        assert got.base_model == b2.pinned  # "qwen/qwen3-0.6b" resolved through latest, pinned
        assert got.parent_model == m1.pinned and got.run_id == "run-2"
        noted = annotate(s, "model", "triage/qwen3-0.6b:v1", {"owner": "ana", "score": 0.9})
        assert resolve(s, "model", "triage/qwen3-0.6b:v1").metadata["annotations"] == {
            "owner": "ana",
            "score": 0.9,
        }
        assert noted.metadata["method"] == "sft"
    out = download_model_files(store, m1, tmp_path / "dl")
    assert (out / "adapter_model.safetensors").read_bytes() == b"w1"
    assert (out / "adapter_config.json").read_text() == '{"r": 8}'


def test_registered_name_guards(reg, tmp_path):
    db, store = reg
    with db.session() as s:
        qwen = register_base_model(s, "Qwen/Qwen3-0.6B", commit=None, metadata={})
        meta = register_base_model(s, "meta-llama/Llama-3.2-1B-Instruct", commit=None, metadata={})
        unsloth = register_base_model(s, "unsloth/Llama-3.2-1B-Instruct", commit=None, metadata={})
        # Project "qwen" training Qwen/Qwen3-0.6B without modelName: the name holds a base model.
        with pytest.raises(Conflict, match="holds base-model versions") as info:
            register_adapter(
                s, store, "qwen", "qwen3-0.6b", _adapter(tmp_path / "a"),
                base_model=qwen.pinned, run_id="r", metadata={},
            )  # fmt: skip
        assert info.value.field == "modelName"
        register_adapter(
            s, store, "t", "llama-3.2-1b-instruct", _adapter(tmp_path / "b"),
            base_model=meta.pinned, run_id="r", metadata={},
        )  # fmt: skip
        with pytest.raises(Conflict, match="trained on meta-llama/llama-3.2-1b-instruct"):
            register_adapter(
                s, store, "t", "llama-3.2-1b-instruct", _adapter(tmp_path / "c", b"other"),
                base_model=unsloth.pinned, run_id="r", metadata={},
            )  # fmt: skip
        # With a modelName of its own it is accepted.
        ok = register_adapter(
            s, store, "qwen", "triage-model", _adapter(tmp_path / "d"),
            base_model=qwen.pinned, run_id="r", metadata={},
        )  # fmt: skip
        assert ok.pinned.startswith("qwen/triage-model:v1@sha256:")
        with pytest.raises(Conflict, match="holds trained-model versions"):
            register_base_model(s, "T/Llama-3.2-1B-Instruct", commit=None, metadata={})
        with pytest.raises(InvalidRequest, match="not a base model"):
            register_adapter(
                s, store, "t", "x", _adapter(tmp_path / "e"),
                base_model=ok.pinned, run_id="r", metadata={},
            )  # fmt: skip
