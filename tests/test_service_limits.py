"""Bounded requests (issue 14 item 3): JSON bodies and annotations have limits set in the
deployment file, refusals quote a short excerpt, never the whole value."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from akka_optimize.deployment import DEFAULT_FILE
from helpers import LiveService, free_port

BODY_LIMIT = 1_000_000
ANNOTATION_LIMIT = 2_000


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """A service whose deployment file sets small JSON body and annotation limits."""
    tmp_path = tmp_path_factory.mktemp("limited")
    home = tmp_path / "home"
    home.mkdir()
    dep = yaml.safe_load(DEFAULT_FILE.read_text())
    dep["service"]["jsonBodyBytes"] = BODY_LIMIT
    dep["limits"]["annotationBytes"] = ANNOTATION_LIMIT
    (home / "deployment.yaml").write_text(yaml.safe_dump(dep))
    svc = LiveService(home=home, config_dir=tmp_path / "config", port=free_port())
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def _register(svc: LiveService) -> None:
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    r = svc.api("POST", "/v1/registry/datasets/triage/train", content=json.dumps(row) + "\n")
    assert r.status_code == 201, r.text


def test_an_oversize_json_body_is_refused_413_naming_the_limit(limited: LiveService) -> None:
    plan = {"project": "triage", "pad": "x" * (BODY_LIMIT + 10)}
    r = limited.api("POST", "/v1/training/runs?dryRun=true", json=plan)
    assert r.status_code == 413
    err = r.json()["error"]
    assert err["code"] == "too_large" and err["field"] == "body"
    assert "service.jsonBodyBytes" in err["message"] and "1,000,000 bytes" in err["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while receiving
        yield b'{"project": "triage", "pad": "'
        for _ in range(12):
            yield b"y" * 100_000
        yield b'"}'

    r = limited.api("POST", "/v1/training/runs?dryRun=true", content=chunks())
    assert r.status_code == 413 and "service.jsonBodyBytes" in r.json()["error"]["message"]
    # Uploads are not JSON bodies: a dataset larger than the JSON limit registers.
    row = {
        "messages": [{"role": "user", "content": "q" * 1000}, {"role": "assistant", "content": "a"}]
    }
    body = "".join(
        json.dumps(
            {
                **row,
                "messages": [
                    dict(row["messages"][0], content=f"{i}" + "q" * 1000),
                    row["messages"][1],
                ],
            }
        )
        + "\n"
        for i in range(1100)
    )
    assert len(body) > BODY_LIMIT
    r = limited.api("POST", "/v1/registry/datasets/triage/big", content=body)
    assert r.status_code == 201, r.text


def test_a_huge_bad_plan_value_gets_a_short_refusal(limited: LiveService) -> None:
    huge = "z" * 400_000
    r = limited.api(
        "POST",
        "/v1/training/runs?dryRun=true",
        json={"project": "triage", huge: 1, "baseModel": huge},
    )
    assert r.status_code == 400
    assert len(r.content) < 20_000
    text = r.text
    assert "zzzz" in text and "more characters" in text
    assert huge not in text


def test_annotations_over_the_limit_are_refused_naming_it(limited: LiveService) -> None:
    _register(limited)
    path = "/v1/registry/datasets/triage/train:v1/annotations"
    r = limited.api("PUT", path, json={"annotations": {"note": "fine"}})
    assert r.status_code == 200, r.text
    r = limited.api("PUT", path, json={"annotations": {"big": "n" * ANNOTATION_LIMIT}})
    assert r.status_code == 413
    err = r.json()["error"]
    assert err["field"] == "annotations"
    assert "limits.annotationBytes" in err["message"] and "2,000 bytes" in err["message"]
    assert "nnnnnnnnnn" not in err["message"]
    r = limited.api("GET", "/v1/registry/datasets/triage/train:v1")
    assert r.json()["metadata"]["annotations"] == {"note": "fine"}


def test_versions_are_listed_a_page_at_a_time(limited: LiveService) -> None:
    for i in range(3):
        row = {"prompt": f"q{i}", "completion": "a"}
        r = limited.api("POST", "/v1/registry/datasets/triage/paged", content=json.dumps(row))
        assert r.status_code == 201, r.text
    path = "/v1/registry/datasets/triage/paged/versions"
    first = limited.api("GET", path, params={"limit": 2}).json()
    assert [v["version"] for v in first["items"]] == ["v1", "v2"] and first["nextAfter"] == 2
    rest = limited.api("GET", path, params={"limit": 2, "after": 2}).json()
    assert [v["version"] for v in rest["items"]] == ["v3"] and rest["nextAfter"] is None
    r = limited.api("GET", path, params={"limit": 0})
    assert r.status_code == 400 and r.json()["error"]["field"] == "limit"
