"""The registry through the real CLI and the live service (issue 3 "Checks")."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from pathlib import Path

from registry_testkit import row, write_jsonl
from test_adapter_checks import make_adapter

from helpers import LiveService

TINY = "akka-optimize/tiny-smollm2"


def _json(svc: LiveService, *args: str, prog: str = "akka-optimize") -> dict:
    return json.loads(svc.cli(*args, "-o", "json", check=True, prog=prog).stdout)


def test_dataset_round_trip(service: LiveService, tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "train.jsonl", [row("a"), row("b")])
    reg = ("registry", "datasets", "register")
    v1 = _json(service, *reg, "triage/train", "-f", str(f), "--alias", "candidate")
    assert v1["version"] == "v1" and v1["created"] is True and v1["aliases"] == ["candidate"]
    again = _json(service, *reg, "Triage/Train", "-f", str(f))
    assert again["ref"] == v1["ref"] and again["created"] is False
    f2 = write_jsonl(tmp_path / "train2.jsonl", [row("a"), row("b", "changed")])
    v2 = _json(service, *reg, "triage/train", "-f", str(f2))
    assert v2["version"] == "v2"
    # Resolution: latest, alias, digest, case.
    assert _json(service, "registry", "datasets", "get", "triage/train")["version"] == "v2"
    assert (
        _json(service, "registry", "datasets", "get", "triage/train:candidate")["version"] == "v1"
    )
    by_digest = _json(service, "registry", "datasets", "get", f"triage/train@{v1['digest']}")
    assert by_digest["ref"] == v1["ref"]
    assert _json(service, "registry", "datasets", "get", "Triage/Train")["ref"] == v2["ref"]
    # The `akka registry …` tree is the same app.
    via_akka = json.loads(
        service.cli(
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
    moved = _json(service, "registry", "datasets", "alias", "set", "triage/train:candidate",
                  "--version", "v2")  # fmt: skip
    assert moved["version"] == "v2"
    assert (
        _json(service, "registry", "datasets", "get", "triage/train:candidate")["version"] == "v2"
    )
    assert _json(service, "registry", "datasets", "get", v1["ref"])["version"] == "v1"
    versions = _json(service, "registry", "datasets", "versions", "triage/train")["items"]
    assert [v["version"] for v in versions] == ["v1", "v2"]
    listed = _json(service, "registry", "datasets", "list")["items"]
    assert listed[0]["name"] == "triage/train" and listed[0]["aliases"] == {"candidate": "v2"}
    # object returns the bytes registered.
    out = tmp_path / "back.jsonl"
    service.cli("registry", "datasets", "object", "triage/train:v1", "-o", str(out), check=True)
    assert out.read_bytes() == f.read_bytes()
    stdout = service.cli("registry", "datasets", "object", "triage/train", check=True).stdout
    assert stdout == f2.read_text()
    text = service.cli("registry", "datasets", "get", "triage/train", check=True).stdout
    assert v2["ref"] in text and "rows" in text


def test_cli_refusals_are_sentences(service: LiveService, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row("1")) + "\n" + '{"messages": [\n')
    out = service.cli("registry", "datasets", "register", "t/bad", "-f", str(bad))
    assert out.returncode == 1 and "line 2" in out.stderr and "Traceback" not in out.stderr
    assert _json(service, "registry", "datasets", "list")["items"] == []
    out = service.cli("registry", "datasets", "get", "t/missing:v3")
    assert out.returncode == 1 and "t/missing is not in the registry" in out.stderr
    out = service.cli("registry", "datasets", "get", "a/b/c")
    assert out.returncode == 1 and "more than one '/'" in out.stderr


def test_info_shows_the_build_version(service: LiveService) -> None:
    from akka_optimize import __version__

    info = _json(service, "registry", "info")
    assert info["version"] == __version__
    assert info["limits"]["uploadBytes"] == 256 * 1024**2
    assert __version__ in service.cli("registry", "info", check=True).stdout


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


def test_bundle_and_model_round_trip(
    service: LiveService, tmp_path: Path, tiny_model_dir: Path
) -> None:
    b = tmp_path / "scoring"
    b.mkdir()
    (b / "reward.py").write_text("def compute_score(x):\n    return 1.0\n")
    reg = ("registry", "bundles", "register")
    v1 = _json(service, *reg, "gsm8k/scoring", "-f", str(b))
    assert _json(service, *reg, "gsm8k/scoring", "-f", str(b))["ref"] == v1["ref"]
    assert _json(service, "registry", "bundles", "get", "gsm8k/scoring")["metadata"]["files"] == 1
    # A crafted archive with ../evil.py is refused and registers nothing.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../evil.py")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"x\n"))
    r = service.api("POST", "/v1/registry/bundles/t/evil", content=buf.getvalue())
    assert r.status_code == 400 and "escapes the bundle root" in r.json()["error"]["message"]
    assert service.api("GET", "/v1/registry/bundles/t/evil").status_code == 404

    # Models: the catalog registers the base model when it is selected.
    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    base = _json(service, "registry", "models", "get", "akka-optimize/tiny-smollm2")
    ad = make_adapter(tiny_model_dir, tmp_path / "adapter", init_lora_weights=False)
    m = _json(service, "registry", "models", "register", "triage/tiny", "-f", str(ad),
              "--base-model", "akka-optimize/tiny-smollm2:v1", "--run-id", "run-7")  # fmt: skip
    assert m["version"] == "v1" and m["baseModel"] == base["ref"] and m["runId"] == "run-7"
    assert m["metadata"]["rank"] == 8
    refused = service.cli("registry", "models", "register", "akka-optimize/tiny-smollm2",
                          "-f", str(ad), "--base-model", "akka-optimize/tiny-smollm2:v1")  # fmt: skip
    assert refused.returncode == 1 and "holds base-model versions" in refused.stderr
    # An adapter the endpoint could not serve is refused with its reason; nothing registers.
    dora = make_adapter(tiny_model_dir, tmp_path / "dora", use_dora=True)
    refused = service.cli("registry", "models", "register", "triage/dora", "-f", str(dora),
                          "--base-model", "akka-optimize/tiny-smollm2:v1")  # fmt: skip
    assert refused.returncode == 1 and "use_dora is true" in refused.stderr
    assert service.api("GET", "/v1/registry/models/triage/dora").status_code == 404
    _json(service, "registry", "models", "alias", "set", "triage/tiny:champion",
          "--version", "v1")  # fmt: skip
    got = _json(service, "registry", "models", "get", "triage/tiny:champion")
    assert got["ref"] == m["ref"]
    _json(service, "registry", "models", "annotate", "triage/tiny:v1", "--set", "owner=ana")
    text = service.cli("registry", "models", "get", "triage/tiny:v1", check=True).stdout
    assert '"owner": "ana"' in text and base["ref"] in text and "run-7" in text
    # Adapters out: the version as a PEFT folder that peft loads, with the same logits.
    got_dir = tmp_path / "downloaded"
    service.cli("registry", "models", "object", "triage/tiny:v1", "-o", str(got_dir), check=True)
    downloaded, uploaded = _peft_logits(tiny_model_dir, got_dir), _peft_logits(tiny_model_dir, ad)
    assert (downloaded - uploaded).abs().max() < 1e-4
    assert (uploaded - _base_logits(tiny_model_dir)).abs().max() > 1e-3  # the adapter acts
    merged_dir = tmp_path / "merged"
    service.cli("registry", "models", "export", "triage/tiny:v1", "--merged", "-o",
                str(merged_dir), check=True)  # fmt: skip
    assert (_merged_logits(merged_dir) - uploaded).abs().max() < 1e-4
    base_only = service.cli("registry", "models", "object", TINY, "-o", str(tmp_path / "b"))
    assert base_only.returncode == 1 and "weights cache" in base_only.stderr
    # training adapters import runs the same checks, under both spellings.
    head = make_adapter(tiny_model_dir, tmp_path / "head", target_modules=["q_proj", "lm_head"])
    refused = service.cli("training", "adapters", "import", "triage/head", "--base", TINY,
                          "-d", str(head), prog="akka-registry")  # fmt: skip
    assert refused.returncode == 1 and "target_modules includes 'lm_head'" in refused.stderr
    imported = _json(service, "training", "adapters", "import", "triage/ext", "--base", TINY,
                     "-d", str(ad), prog="akka-registry")  # fmt: skip
    assert imported["version"] == "v1" and imported["baseModel"] == base["ref"]
    names = [x["name"] for x in _json(service, "registry", "models", "list")["items"]]
    assert names == ["akka-optimize/tiny-smollm2", "triage/ext", "triage/tiny"]


def _peft_logits(base_dir: Path, adapter_dir: Path | None):
    """fp32 logits of ``PeftModel.from_pretrained(base, adapter_dir)`` (the base model alone
    without ``adapter_dir``) on a fixed prompt."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    with torch.no_grad():
        return model.eval()(torch.tensor([[1, 17, 42, 99, 7]])).logits


def _merged_logits(folder: Path):
    """Logits of ``AutoModelForCausalLM.from_pretrained(folder)`` on the same prompt."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([[1, 17, 42, 99, 7]])).logits


def _base_logits(base_dir: Path):
    return _peft_logits(base_dir, None)


def test_images_push_and_examples_naming_local_images(service: LiveService, tmp_path: Path):
    png = tmp_path / "cat.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    pushed = _json(service, "registry", "images", "push", str(png))
    assert pushed[0]["digest"].startswith("sha256:") and pushed[0]["filename"] == "cat.png"
    r = service.api("GET", f"/v1/registry/images/{pushed[0]['digest']}")
    assert r.status_code == 200 and r.content == png.read_bytes()
    out = service.cli("registry", "images", "push", str(tmp_path / "nope.png"))
    assert out.returncode == 1 and "is not a file" in out.stderr


def test_concurrent_cli_registrations_create_one_version(service: LiveService, tmp_path: Path):
    f = write_jsonl(tmp_path / "same.jsonl", [row(str(i)) for i in range(200)])
    outs: list = []

    def go() -> None:
        outs.append(service.cli("registry", "datasets", "register", "t/race", "-f", str(f),
                                "-o", "json"))  # fmt: skip

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    refs = {json.loads(o.stdout)["ref"] for o in outs}
    assert len(refs) == 1
    assert len(_json(service, "registry", "datasets", "versions", "t/race")["items"]) == 1
