"""Tinker routes across projects and their malformed inputs (issue 48 items 3, 4, 5, 6):
project ``other``'s key never reaches project ``demo``'s sessions, futures or sampling
clients, and learns nothing it could not learn from a missing one; bad fields are refused
with a sentence naming them, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tinker_kit import TINY, tinker_service


class Keys:
    """The live service and a caller per project."""

    def __init__(self, url: str, keys: dict[str, str]) -> None:
        self.url, self.keys = url, keys

    def post(self, project: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        headers = {"X-API-Key": self.keys[project]}
        return httpx.post(self.url + "/api/v1" + path, json=body or {}, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    with tinker_service(tmp_path_factory.mktemp("tinker-isolation")) as (live, keys):
        yield Keys(live.url, keys)


def _session(svc: Keys, project: str) -> str:
    r = svc.post(project, "/create_session", {"tags": ["t"], "user_metadata": {}})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def _refusal(r: httpx.Response) -> tuple[int, str | None]:
    return r.status_code, r.json().get("error", {}).get("field")


def test_another_project_s_future_reads_as_a_missing_one(svc: Keys) -> None:
    sid = _session(svc, "demo")
    made = svc.post(  # refused in its future: no worker starts
        "demo",
        "/create_model",
        {"session_id": sid, "base_model": TINY, "lora_config": {"rank": "abc"}},
    )
    assert made.status_code == 200, made.text
    rid = made.json()["request_id"]
    mine = svc.post("demo", "/retrieve_future", {"request_id": rid})
    assert mine.json()["error"] == "lora_config.rank is 'abc'; give a rank from 1 to 512."
    theirs = svc.post("other", "/retrieve_future", {"request_id": rid})
    missing = svc.post("other", "/retrieve_future", {"request_id": "req-0123456789abcdef"})
    assert _refusal(theirs) == _refusal(missing) == (404, "request_id"), theirs.text
    assert "abc" not in theirs.text


def test_another_project_s_session_is_neither_finished_nor_seen(svc: Keys) -> None:
    sid = _session(svc, "demo")
    assert svc.post("other", f"/sessions/{sid}/finish").json() == {}
    assert svc.post("demo", "/session_heartbeat", {"session_id": sid}).status_code == 200
    theirs = svc.post("other", "/session_heartbeat", {"session_id": sid})
    missing = svc.post("other", "/session_heartbeat", {"session_id": "sess-000000000000"})
    assert theirs.status_code == missing.status_code == 410
    assert theirs.json() == missing.json()
    assert svc.post("demo", f"/sessions/{sid}/finish").json() == {}
    assert svc.post("demo", "/session_heartbeat", {"session_id": sid}).status_code == 410


def test_another_project_s_sampling_client_is_not_named(svc: Keys) -> None:
    sid = _session(svc, "demo")
    made = svc.post("demo", "/create_sampling_session", {"session_id": sid, "base_model": TINY})
    assert made.status_code == 200, made.text
    sampler = made.json()["sampling_session_id"]
    try:
        body = {"sampling_session_id": sampler, "num_samples": 1, "prompt": {"chunks": []}}
        theirs = svc.post("other", "/asample", body)
        missing = svc.post("other", "/asample", {**body, "sampling_session_id": "sess-x:sample:0"})
        assert _refusal(theirs) == _refusal(missing) == (400, "sampling_session_id")
        assert theirs.json()["error"]["message"] == missing.json()["error"]["message"].replace(
            "sess-x:sample:0", sampler
        )
    finally:
        svc.post("demo", f"/sessions/{sid}/finish")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/create_session", {"tags": 5}, "tags"),
        ("/create_session", {"tags": [1, 2]}, "tags"),
        ("/create_session", {"user_metadata": "x"}, "user_metadata"),
        ("/create_model", {"base_model": TINY, "lora_config": {"rank": 4}, "model_seq_id": -1},
         "model_seq_id"),
    ],
)  # fmt: skip
def test_malformed_session_fields_are_refused_naming_them(
    svc: Keys, path: str, body: dict[str, Any], field: str
) -> None:
    if path != "/create_session":
        body = {**body, "session_id": _session(svc, "demo")}
    r = svc.post("demo", path, body)
    assert _refusal(r) == (400, field), r.text


@pytest.mark.parametrize(
    ("lora", "sentence"),
    [
        ({"rank": [1]}, "lora_config.rank is [1]; give a rank from 1 to 512."),
        ("rank", "lora_config is 'rank'; give an object with rank (1 to 512)."),
        (
            {"rank": 4, "train_attn": "maybe"},
            "lora_config.train_attn is 'maybe'; give true or false.",
        ),
    ],
)
def test_malformed_lora_configs_fail_their_future_naming_the_field(
    svc: Keys, lora: Any, sentence: str
) -> None:
    sid = _session(svc, "demo")
    made = svc.post(
        "demo", "/create_model", {"session_id": sid, "base_model": TINY, "lora_config": lora}
    )
    assert made.status_code == 200, made.text
    done = svc.post("demo", "/retrieve_future", {"request_id": made.json()["request_id"]})
    assert done.json() == {"error": sentence, "category": "user"}
