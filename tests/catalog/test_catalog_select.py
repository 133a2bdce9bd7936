"""Selecting base models through the real CLI and service (issue 6, seeds/000 "Base model
flexibility", seeds/001 "Base model selection" / "Base model listing")."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from akka_optimize.catalog.cache import ready_model_dir
from akka_optimize.db import Database
from akka_optimize.deployment import load_deployment
from akka_optimize.errors import Conflict, NotFound
from akka_optimize.settings import Settings
from helpers import BIN, LiveService, free_port, hold_at, release, wait_held

TINY = "akka-optimize/tiny-smollm2"


def _json(svc: LiveService, *args: str, check: bool = True) -> dict:
    out = svc.cli(*args, "-o", "json", check=check)
    return json.loads(out.stdout)


def _listing(svc: LiveService, *flags: str) -> dict[str, dict]:
    data = _json(svc, "training", "base-models", "list", *flags)
    return {m["repository"]: m for m in data["baseModels"]}


def _ready_dir(svc: LiveService, ref: str):
    settings = Settings(home=svc.home, deployment_file=_dep_of(svc))
    db = Database(settings.database_url or "")
    try:
        with db.session() as s:
            return ready_model_dir(s, settings, ref)
    finally:
        db.dispose()


def _dep_of(svc: LiveService) -> Path | None:
    p = svc.extra_env.get("AKKA_OPTIMIZE_DEPLOYMENT")
    return Path(p) if p else None


def _service_with_catalog(tmp_path: Path, extra: list[dict]) -> LiveService:
    base = yaml.safe_load(Path(load_deployment().source).read_text())
    base["catalog"] = [{"include": "shipped"}, *extra]
    dep = tmp_path / "deployment.yaml"
    dep.write_text(yaml.safe_dump(base))
    svc = LiveService(
        home=tmp_path / "home",
        config_dir=tmp_path / "config",
        port=free_port(),
        extra_env={"AKKA_OPTIMIZE_DEPLOYMENT": str(dep)},
    )
    return svc.start()


@pytest.fixture
def fast_tiny(tmp_path: Path, smollm2_tokenizer_dir: Path) -> Iterator[LiveService]:
    """A service whose tiny entry takes the tokenizer from a prepared folder, plus an entry
    whose GGUF file is corrupt."""
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"not a real gguf file" * 10)
    svc = _service_with_catalog(
        tmp_path,
        [
            {
                "repository": TINY,
                "source": {"kind": "tiny", "tokenizer": str(smollm2_tokenizer_dir)},
            },
            {
                "repository": "acme/corrupt-model",
                "family": "llama",
                "modelType": "llama",
                "loraTargetModules": ["q_proj", "v_proj"],
                "source": {"kind": "gguf", "path": str(bad)},
            },
            {
                "repository": "acme/Bad+Name",
                "family": "llama",
                "modelType": "llama",
                "loraTargetModules": ["q_proj"],
                "source": {"kind": "gguf", "path": str(bad)},
            },
        ],
    )
    try:
        yield svc
    finally:
        svc.stop()


def test_tiny_model_selected_from_a_fresh_home_is_registered_and_cached(
    service: LiveService,
) -> None:
    out = service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    assert "READY as akka-optimize/tiny-smollm2:v1; weights cached in" in out.stdout
    assert "converting the tokenizer" in out.stderr  # progress lines (stderr) while it works

    m = _listing(service)[TINY]
    assert (m["state"], m["model"], m["cached"], m["attempts"]) == (
        "READY",
        "akka-optimize/tiny-smollm2:v1",
        True,
        1,
    )
    path, entry = _ready_dir(service, "Akka-Optimize/Tiny-SmolLM2")
    assert entry.repository == TINY and path == Path(m["weightsPath"])
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    config = json.loads((path / "config.json").read_text())
    assert config["max_position_embeddings"] == entry.max_context_tokens
    assert _ready_dir(service, "akka-optimize/tiny-smollm2:v1")[0] == path

    text = service.cli("training", "base-models", "list", check=True).stdout
    assert "akka-optimize/tiny-smollm2:v1" in text and "READY" in text
    models = service.cli("registry", "models", "list", "-o", "json", check=True).stdout
    assert "akka-optimize/tiny-smollm2" in models

    waited = service.cli("training", "base-models", "wait", TINY, check=True).stdout
    assert "weights cached in" in waited


def test_list_all_names_unselected_entries_by_repository_at_commit(service: LiveService) -> None:
    allowed = _listing(service, "--all")
    d = allowed["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert d["selected"] is False and d["state"] is None and d["default"] is True
    assert d["model"] == f"HuggingFaceTB/SmolLM2-135M-Instruct@{d['commit']}"
    assert len(d["commit"]) == 40
    assert allowed["Qwen/Qwen3-0.6B"]["model"] == "Qwen/Qwen3-0.6B@main"
    assert _listing(service) == {}
    text = service.cli("training", "base-models", "list", "--all", check=True).stdout
    assert f"HuggingFaceTB/SmolLM2-135M-Instruct@{d['commit'][:12]}" in text


def test_unknown_repository_is_refused_naming_the_catalog(service: LiveService) -> None:
    out = service.cli("training", "base-models", "select", "acme/unknown-7b", "--wait")
    assert out.returncode == 1
    assert "acme/unknown-7b is not in this deployment's base-model catalog" in out.stderr
    assert "catalog.yaml" in out.stderr and "Traceback" not in out.stderr
    assert _listing(service) == {}
    r = service.api("POST", "/v1/training/base-models", json={"repository": "acme/unknown-7b"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_in_catalog"


def test_a_corrupt_gguf_ends_failed_with_one_sentence(fast_tiny: LiveService) -> None:
    out = fast_tiny.cli("training", "base-models", "select", "acme/corrupt-model", "--wait")
    assert out.returncode == 1
    assert "acme/corrupt-model failed: Converting the GGUF file" in out.stderr
    assert "corrupt.gguf" in out.stderr and "Traceback" not in out.stderr
    m = _listing(fast_tiny)["acme/corrupt-model"]
    assert m["state"] == "FAILED" and not m["cached"]
    assert m["error"].startswith("Converting the GGUF file") and m["error"].endswith(".")
    assert m["model"].startswith("acme/corrupt-model@")  # never registered
    text = fast_tiny.cli("training", "base-models", "list", check=True).stdout
    assert "FAILED" in text and "acme/corrupt-model failed: Converting" in text
    with pytest.raises(Conflict) as ei:
        _ready_dir(fast_tiny, "acme/corrupt-model")
    assert ei.value.code == "base_model_failed" and "Converting the GGUF file" in ei.value.message
    registry = fast_tiny.cli("registry", "models", "list", "-o", "json", check=True).stdout
    assert "corrupt" not in registry
    # A repository the registry cannot name is refused before anything is selected.
    refused = fast_tiny.cli("training", "base-models", "select", "acme/Bad+Name")
    assert refused.returncode == 1 and "acme/Bad+Name" in refused.stderr
    assert "The registry cannot name acme/Bad+Name as a model" in refused.stderr
    assert "acme/Bad+Name" not in _listing(fast_tiny)


def test_selecting_twice_converts_once(fast_tiny: LiveService) -> None:
    first = _json(fast_tiny, "training", "base-models", "select", TINY, "--wait")
    stamp = (Path(first["weightsPath"]) / "model.safetensors").stat().st_mtime_ns
    again = _json(fast_tiny, "training", "base-models", "select", TINY)
    assert again["state"] == "READY" and again["model"] == first["model"]
    assert again["attempts"] == 1 and first["attempts"] == 1
    assert (Path(first["weightsPath"]) / "model.safetensors").stat().st_mtime_ns == stamp
    assert first["model"] == "akka-optimize/tiny-smollm2:v1"


def test_two_concurrent_selects_convert_once_and_both_return_ready(
    fast_tiny: LiveService,
) -> None:
    cmd = [
        str(BIN / "akka-optimize"),
        "training",
        "base-models",
        "select",
        TINY,
        "--wait",
        "-o",
        "json",
    ]
    procs = [
        subprocess.Popen(
            cmd, env=fast_tiny.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    views = [json.loads(out) for out, _ in results]
    assert {v["state"] for v in views} == {"READY"}
    assert {v["model"] for v in views} == {"akka-optimize/tiny-smollm2:v1"}
    assert _listing(fast_tiny)[TINY]["attempts"] == 1
    log = fast_tiny.home / "weights" / ".logs" / "akka-optimize--tiny-smollm2.log"
    assert log.exists()
    versions = fast_tiny.cli("registry", "models", "versions", TINY, "-o", "json", check=True)
    assert [v["version"] for v in json.loads(versions.stdout)["items"]] == ["v1"]


def test_a_plain_select_returns_when_the_weights_are_cached(fast_tiny: LiveService) -> None:
    """F061: "select returns when they are cached"; after it returns, list shows READY and
    cached. The fetch is held midway, so a select that returned at FETCHING would print
    FETCHING: this one prints READY only once the held fetch is let go."""
    hold_at(fast_tiny, "fetch")
    cmd = [str(BIN / "akka-optimize"), "training", "base-models", "select", TINY]
    proc = subprocess.Popen(
        cmd, env=fast_tiny.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_held(fast_tiny)
    assert _listing(fast_tiny)[TINY]["state"] == "FETCHING"
    release(fast_tiny)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "READY as akka-optimize/tiny-smollm2:v1; weights cached in" in out
    assert "FETCHING" in err  # progress lines while it waited, on stderr
    m = _listing(fast_tiny)[TINY]
    assert (m["state"], m["cached"]) == ("READY", True)
    assert (Path(m["weightsPath"]) / "config.json").is_file()
    # --no-wait answers at once with the state (here READY already) and the same model.
    now = _json(fast_tiny, "training", "base-models", "select", TINY, "--no-wait")
    assert (now["state"], now["model"]) == ("READY", "akka-optimize/tiny-smollm2:v1")


def test_waiting_on_what_is_not_ready(service: LiveService) -> None:
    out = service.cli("training", "base-models", "wait", TINY)
    assert out.returncode == 1 and "is not selected; select it with" in out.stderr
    with pytest.raises(Conflict) as ei:
        _ready_dir(service, TINY)
    assert ei.value.code == "base_model_not_selected"
    with pytest.raises(NotFound):
        _ready_dir(service, "acme/unknown")


def test_a_hub_model_offline_fails_saying_the_hub_is_unreachable(service: LiveService) -> None:
    out = service.cli("training", "base-models", "select", "Qwen/Qwen3-0.6B", "--wait")
    assert out.returncode == 1
    assert "The Hugging Face hub is unreachable from this service" in out.stderr
    assert _listing(service)["Qwen/Qwen3-0.6B"]["state"] == "FAILED"


def test_candidates_say_when_the_hub_is_unreachable(service: LiveService) -> None:
    out = service.cli(
        "training", "base-models", "candidates", "--author", "google", "--match", "gemma-4-*"
    )
    assert out.returncode == 1
    assert "The Hugging Face hub is unreachable from this service" in out.stderr
    assert "repositories of google" in out.stderr


def test_a_fetch_cut_by_a_service_crash_resumes_at_restart(fast_tiny: LiveService) -> None:
    import signal

    hold_at(fast_tiny, "fetch")  # the fetch subprocess waits midway, in its cache lock
    first = _json(fast_tiny, "training", "base-models", "select", TINY, "--no-wait")
    wait_held(fast_tiny)
    cut = _listing(fast_tiny)[TINY]
    assert (cut["state"], cut["attempts"], cut["cached"]) == ("FETCHING", 1, False)
    fast_tiny.stop(sig=signal.SIGKILL)  # the service and its fetch subprocess die mid-fetch
    release(fast_tiny)  # the fetch the restart begins goes through
    fast_tiny.start()
    waited = _json(
        fast_tiny, "training", "base-models", "wait", first["id"][:8], "--timeout", "180"
    )
    assert waited["state"] == "READY" and waited["cached"] is True
    assert waited["model"] == "akka-optimize/tiny-smollm2:v1"
    assert waited["attempts"] == 2  # the cut fetch, then the one the restart began
    # Weights removed from the cache: the selection is no longer usable until selected again.
    import shutil

    shutil.rmtree(waited["weightsPath"])
    with pytest.raises(Conflict) as ei:
        _ready_dir(fast_tiny, TINY)
    assert ei.value.code == "base_model_not_ready" and "no longer in the cache" in ei.value.message
    again = _json(fast_tiny, "training", "base-models", "select", TINY, "--wait")
    assert again["cached"] is True and again["attempts"] == waited["attempts"] + 1
