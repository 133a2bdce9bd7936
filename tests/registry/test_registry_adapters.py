"""Adapters in and out of the registry (F118, issue 16): `registry models register` and
`training adapters import` check a PEFT adapter against the selected base model; `registry
models object` and `registry models export --merged` write what `peft` and
`transformers` load with the same logits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_adapter_checks import make_adapter

from helpers import LiveService, hold_at, release, wait_held

TINY = "akka-optimize/tiny-smollm2"


def _json(svc: LiveService, *args: str, prog: str = "akka-optimize") -> dict:
    return json.loads(svc.cli(*args, "-o", "json", check=True, prog=prog).stdout)


@pytest.fixture
def registered(service: LiveService, tmp_path: Path, tiny_model_dir: Path) -> dict:
    """The tiny base model selected and a PEFT adapter (random B, so it changes the
    logits) registered as ``triage/tiny:v1``; returns ``{base, model, adapter}``."""
    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    base = _json(service, "registry", "models", "get", "akka-optimize/tiny-smollm2")
    ad = make_adapter(tiny_model_dir, tmp_path / "adapter", init_lora_weights=False)
    m = _json(service, "registry", "models", "register", "triage/tiny", "-f", str(ad),
              "--base-model", "akka-optimize/tiny-smollm2:v1", "--run-id", "run-7")  # fmt: skip
    return {"base": base, "model": m, "adapter": ad}


@pytest.mark.timeout(1200)
def test_adapters_in_are_checked(
    service: LiveService, tmp_path: Path, tiny_model_dir: Path, registered: dict
) -> None:
    base, m, ad = registered["base"], registered["model"], registered["adapter"]
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
    # training adapters import runs the same checks, under both spellings.
    head = make_adapter(tiny_model_dir, tmp_path / "head", target_modules=["q_proj", "lm_head"])
    refused = service.cli("training", "adapters", "import", "triage/head", "--base", TINY,
                          "-d", str(head), prog="akka-registry")  # fmt: skip
    assert refused.returncode == 1 and "target_modules includes 'lm_head'" in refused.stderr
    imported = _json(service, "training", "adapters", "import", "triage/ext", "--base", TINY,
                     "-d", str(ad), prog="akka-registry")  # fmt: skip
    assert imported["state"] == "REGISTERED" and imported["model"].startswith("triage/ext:v1@")
    ext = _json(service, "registry", "models", "get", "triage/ext:v1")
    assert ext["baseModel"] == base["ref"] and ext["metadata"]["importId"] == imported["id"]
    names = [x["name"] for x in _json(service, "registry", "models", "list")["items"]]
    assert names == ["akka-optimize/tiny-smollm2", "triage/ext", "triage/tiny"]


@pytest.mark.timeout(1200)
def test_adapters_out_load_in_peft_and_transformers(
    service: LiveService, tmp_path: Path, tiny_model_dir: Path, registered: dict
) -> None:
    ad = registered["adapter"]
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


@pytest.mark.timeout(1200)
def test_an_import_shows_its_progress_and_outcome_by_id(
    service: LiveService, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Issue 54 item 6 (F118): `adapters import` prints the import's ID and waits unless
    --no-wait; `adapters get IMPORT_ID` shows the stage under way (the import held while it
    checks), then the registered version; a DoRA import ends FAILED with its reason and
    registers nothing."""
    service.cli("training", "base-models", "select", TINY, check=True)
    ad = make_adapter(tiny_model_dir, tmp_path / "adapter", init_lora_weights=False)
    hold_at(service, "adapter-import")
    started = _json(service, "training", "adapters", "import", "triage/ext", "--base", TINY,
                    "-d", str(ad), "--no-wait")  # fmt: skip
    assert (started["state"], started["name"], started["model"]) == ("CHECKING", "triage/ext", None)
    wait_held(service)
    shown = service.cli("training", "adapters", "get", started["id"][:8], check=True).stdout
    assert "CHECKING" in shown and "1/3" in shown and "checking the adapter against" in shown
    assert service.api("GET", "/v1/registry/models/triage/ext").status_code == 404
    release(service)
    waited = service.cli("training", "adapters", "import", "triage/ext", "--base", TINY,
                         "-d", str(ad), check=True)  # fmt: skip
    assert "training adapters get" in waited.stderr  # the ID, printed before the wait
    assert "REGISTERED as triage/ext:v1@sha256:" in waited.stderr
    assert "triage/ext:v1@sha256:" in waited.stdout  # the version, as `registry models get`
    done = _json(service, "training", "adapters", "get", started["id"])
    assert (done["state"], done["stagesDone"], done["error"]) == ("REGISTERED", 3, None)
    assert done["model"].startswith("triage/ext:v1@sha256:") and done["checks"]["rank"] == 8

    dora = make_adapter(tiny_model_dir, tmp_path / "dora", use_dora=True)
    refused = service.cli("training", "adapters", "import", "triage/dora", "--base", TINY,
                          "-d", str(dora))  # fmt: skip
    assert refused.returncode == 1 and "use_dora is true" in refused.stderr
    iid = re.search(r"Import ([0-9a-f]{32}) CHECKING", refused.stderr).group(1)
    failed = _json(service, "training", "adapters", "get", iid)
    assert failed["state"] == "FAILED" and "use_dora is true" in failed["error"]
    assert failed["model"] is None
    assert service.api("GET", "/v1/registry/models/triage/dora").status_code == 404
    missing = service.cli("training", "adapters", "get", "ffffffff")
    assert missing.returncode == 1 and "No adapter import 'ffffffff'" in missing.stderr


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
