"""The registry through the real CLI and the live service (issue 3 "Checks")."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from pathlib import Path

from registry_testkit import row, write_jsonl

from helpers import LiveService


def _json(svc: LiveService, *args: str, prog: str = "akka-optimize") -> dict:
    return json.loads(svc.cli(*args, "-o", "json", check=True, prog=prog).stdout)


def test_dataset_round_trip(shared_service: LiveService, tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "train.jsonl", [row("a"), row("b")])
    reg = ("registry", "datasets", "register")
    v1 = _json(shared_service, *reg, "triage/train", "-f", str(f), "--alias", "candidate")
    assert v1["version"] == "v1" and v1["created"] is True and v1["aliases"] == ["candidate"]
    again = _json(shared_service, *reg, "Triage/Train", "-f", str(f))
    assert again["ref"] == v1["ref"] and again["created"] is False
    f2 = write_jsonl(tmp_path / "train2.jsonl", [row("a"), row("b", "changed")])
    v2 = _json(shared_service, *reg, "triage/train", "-f", str(f2))
    assert v2["version"] == "v2"
    # Resolution: latest, alias, digest, case.
    assert _json(shared_service, "registry", "datasets", "get", "triage/train")["version"] == "v2"
    assert (
        _json(shared_service, "registry", "datasets", "get", "triage/train:candidate")["version"]
        == "v1"
    )
    by_digest = _json(shared_service, "registry", "datasets", "get", f"triage/train@{v1['digest']}")
    assert by_digest["ref"] == v1["ref"]
    assert _json(shared_service, "registry", "datasets", "get", "Triage/Train")["ref"] == v2["ref"]
    # The `akka registry …` tree is the same app.
    via_akka = json.loads(
        shared_service.cli(
            "registry",
            "datasets",
            "get",
            "triage/train:v1",
            "-o",
            "json",
            prog="akka-registry",
            check=True,
        ).stdout  # fmt: skip
    )
    assert via_akka["ref"] == v1["ref"]
    moved = _json(shared_service, "registry", "datasets", "alias", "set", "triage/train:candidate",
                  "--version", "v2")  # fmt: skip
    assert moved["version"] == "v2"
    assert (
        _json(shared_service, "registry", "datasets", "get", "triage/train:candidate")["version"]
        == "v2"
    )
    assert _json(shared_service, "registry", "datasets", "get", v1["ref"])["version"] == "v1"
    versions = _json(shared_service, "registry", "datasets", "versions", "triage/train")["items"]
    assert [v["version"] for v in versions] == ["v1", "v2"]
    listed = _json(shared_service, "registry", "datasets", "list")["items"]
    assert listed[0]["name"] == "triage/train" and listed[0]["aliases"] == {"candidate": "v2"}
    # object returns the bytes registered.
    out = tmp_path / "back.jsonl"
    shared_service.cli(
        "registry", "datasets", "object", "triage/train:v1", "-o", str(out), check=True
    )
    assert out.read_bytes() == f.read_bytes()
    stdout = shared_service.cli("registry", "datasets", "object", "triage/train", check=True).stdout
    assert stdout == f2.read_text()
    text = shared_service.cli("registry", "datasets", "get", "triage/train", check=True).stdout
    assert v2["ref"] in text and "rows" in text


def test_cli_refusals_are_sentences(shared_service: LiveService, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row("1")) + "\n" + '{"messages": [\n')
    before = _json(shared_service, "registry", "datasets", "list")["items"]
    out = shared_service.cli("registry", "datasets", "register", "t/bad", "-f", str(bad))
    assert out.returncode == 1 and "line 2" in out.stderr and "Traceback" not in out.stderr
    assert _json(shared_service, "registry", "datasets", "list")["items"] == before  # nothing
    out = shared_service.cli("registry", "datasets", "get", "t/missing:v3")
    assert out.returncode == 1 and "t/missing is not in the registry" in out.stderr
    out = shared_service.cli("registry", "datasets", "get", "a/b/c")
    assert out.returncode == 1 and "more than one '/'" in out.stderr


def test_info_shows_the_build_version(shared_service: LiveService) -> None:
    from akka_optimize import __version__

    info = _json(shared_service, "registry", "info")
    assert info["version"] == __version__
    assert info["limits"]["uploadBytes"] == 256 * 1024**2
    assert __version__ in shared_service.cli("registry", "info", check=True).stdout


def test_upload_over_the_deployment_limit_is_413_naming_it(service: LiveService) -> None:
    (service.home / "deployment.yaml").write_text(
        "deviceProfiles:\n  - {name: cpu, kind: cpu, hostMemoryGiB: 4}\n"
        "limits:\n  uploadBytes: 2048\n"
    )
    body = b"".join(json.dumps(row("x" * 100)).encode() + b"\n" for _ in range(40))
    r = service.api("POST", "/v1/registry/datasets/t/big", content=body)
    assert r.status_code == 413
    assert "2,048 bytes" in r.json()["error"]["message"]
    assert "uploadBytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit applies while streaming
        yield body

    r = service.api("POST", "/v1/registry/datasets/t/big", content=chunks())
    assert r.status_code == 413
    assert list((service.home / "uploads").iterdir()) == []


def test_bundle_round_trip(shared_service: LiveService, tmp_path: Path) -> None:
    b = tmp_path / "scoring"
    b.mkdir()
    (b / "reward.py").write_text("def compute_score(x):\n    return 1.0\n")
    reg = ("registry", "bundles", "register")
    v1 = _json(shared_service, *reg, "gsm8k/scoring", "-f", str(b))
    assert _json(shared_service, *reg, "gsm8k/scoring", "-f", str(b))["ref"] == v1["ref"]
    assert (
        _json(shared_service, "registry", "bundles", "get", "gsm8k/scoring")["metadata"]["files"]
        == 1
    )
    # A crafted archive with ../evil.py is refused and registers nothing.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../evil.py")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"x\n"))
    r = shared_service.api("POST", "/v1/registry/bundles/t/evil", content=buf.getvalue())
    assert r.status_code == 400 and "escapes the bundle root" in r.json()["error"]["message"]
    assert shared_service.api("GET", "/v1/registry/bundles/t/evil").status_code == 404


def test_images_push_and_examples_naming_local_images(shared_service: LiveService, tmp_path: Path):
    png = tmp_path / "cat.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    pushed = _json(shared_service, "registry", "images", "push", str(png))
    assert pushed[0]["digest"].startswith("sha256:") and pushed[0]["filename"] == "cat.png"
    r = shared_service.api("GET", f"/v1/registry/images/{pushed[0]['digest']}")
    assert r.status_code == 200 and r.content == png.read_bytes()
    out = shared_service.cli("registry", "images", "push", str(tmp_path / "nope.png"))
    assert out.returncode == 1 and "is not a file" in out.stderr


def test_concurrent_cli_registrations_create_one_version(
    shared_service: LiveService, tmp_path: Path
):
    f = write_jsonl(tmp_path / "same.jsonl", [row(str(i)) for i in range(200)])
    outs: list = []

    def go() -> None:
        outs.append(shared_service.cli("registry", "datasets", "register", "t/race", "-f", str(f),
                                "-o", "json"))  # fmt: skip

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    refs = {json.loads(o.stdout)["ref"] for o in outs}
    assert len(refs) == 1
    assert len(_json(shared_service, "registry", "datasets", "versions", "t/race")["items"]) == 1


def test_versions_follow_every_page(shared_service: LiveService, monkeypatch) -> None:
    """`registry … versions` lists every version, not the service's first page: the CLI
    follows ``nextAfter`` (here with pages of 2 over 5 versions)."""
    from akka_optimize.cli.client import Client
    from akka_optimize.cli.registry.commands import all_versions

    for i in range(5):
        body = json.dumps(row(f"paged {i}")) + "\n"
        r = shared_service.api("POST", "/v1/registry/datasets/triage/paged-cli", content=body)
        assert r.status_code == 201, r.text
    for key, value in shared_service.env().items():
        monkeypatch.setenv(key, value)
    path = "/v1/registry/datasets/triage/paged-cli/versions"
    doc = all_versions(Client("registry"), path, page=2)
    assert [v["version"] for v in doc["items"]] == ["v1", "v2", "v3", "v4", "v5"]
    assert doc["nextAfter"] is None
    assert [v["version"] for v in all_versions(Client("registry"), path)["items"]] == [
        "v1", "v2", "v3", "v4", "v5"
    ]  # fmt: skip
