"""The foundation: the real service and the real CLI (issue 2)."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

import cluster_stores
from helpers import BIN, LiveService, base_env, free_port
from pg import postgres_server


def test_healthz_needs_no_token(shared_service: LiveService) -> None:
    r = httpx.get(shared_service.url + "/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_routes_without_token_get_401_with_a_sentence(shared_service: LiveService) -> None:
    r = httpx.get(shared_service.url + "/v1/training/info")
    assert r.status_code == 401
    err = r.json()["error"]
    assert err["code"] == "unauthorized"
    assert "bearer token" in err["message"]
    r = httpx.get(
        shared_service.url + "/v1/training/info", headers={"Authorization": "Bearer ak_nope"}
    )
    assert r.status_code == 401 and "not known" in r.json()["error"]["message"]


def test_unknown_route_answers_the_error_shape(shared_service: LiveService) -> None:
    r = shared_service.api("GET", "/v1/nothing/here")
    assert r.status_code == 404
    assert set(r.json()["error"]) >= {"code", "message", "field"}


def test_training_info_reports_stores_and_start(shared_service: LiveService) -> None:
    out = shared_service.cli("training", "info", "-o", "json", check=True)
    info = json.loads(out.stdout)
    assert info["startedCompletely"] is True
    if cluster_stores.enabled():  # the second pass (tests/cluster_stores.py)
        assert info["stateStore"]["kind"] == "postgresql"
        assert info["blobStore"]["url"].startswith(f"s3://{cluster_stores.BUCKET}/")
    else:
        assert info["stateStore"]["kind"] == "sqlite"
        assert info["blobStore"]["url"].endswith("blobs")
    assert info["version"]


def test_both_commands_agree_and_name_themselves(shared_service: LiveService) -> None:
    a = json.loads(shared_service.cli("training", "info", "-o", "json", check=True).stdout)
    b = json.loads(
        shared_service.cli("training", "info", "-o", "json", prog="akka", check=True).stdout
    )
    assert a == b
    help_a = shared_service.cli("training", "info", "--help", check=True).stdout
    help_b = shared_service.cli("training", "info", "--help", prog="akka", check=True).stdout
    assert "akka-optimize training info" in help_a
    assert "akka optimize training info" in help_b
    assert "akka-optimize" not in help_b


def test_bad_output_format_is_a_usage_error(shared_service: LiveService) -> None:
    out = shared_service.cli("training", "info", "-o", "yaml")
    assert out.returncode == 2
    assert "text, json or wide" in out.stderr
    assert "Traceback" not in out.stderr


def test_info_exits_non_zero_until_started(tmp_path) -> None:
    svc = LiveService(
        home=tmp_path / "h",
        config_dir=tmp_path / "c",
        port=free_port(),
        extra_env={"AKKA_OPTIMIZE_STARTUP_DELAY": "8"},
    )
    svc.home.mkdir(parents=True)
    # A development-style token checks without the database, so info answers during start-up.
    from akka_optimize.devtoken import ensure_dev_secret, mint_dev_token

    svc.token = mint_dev_token(ensure_dev_secret(svc.home))
    svc.start(wait_started=False)
    try:
        early = svc.cli("training", "info", "-o", "json")
        assert early.returncode == 1
        assert json.loads(early.stdout)["startedCompletely"] is False
        assert "not started completely" in early.stderr
        svc.wait_started(60)
        assert svc.cli("training", "info").returncode == 0
    finally:
        svc.stop()


def test_issued_token_is_needed_and_login_saves_it(shared_service: LiveService, tmp_path) -> None:
    env = shared_service.env(AKKA_OPTIMIZE_CONFIG=str(tmp_path / "config"))  # its own login
    env.pop("AKKA_OPTIMIZE_TOKEN")
    out = shared_service.cli("training", "info", env=env)
    assert out.returncode == 1 and "login" in out.stderr and "Traceback" not in out.stderr
    shared_service.cli(
        "login", "--token", shared_service.token, "--url", shared_service.url, env=env, check=True
    )
    assert shared_service.cli("training", "info", env=env).returncode == 0


def test_dev_token_is_minted_for_localhost_9001_only(tmp_path, monkeypatch) -> None:
    from akka_optimize.cli.client import resolve_token
    from akka_optimize.devtoken import ensure_dev_secret, mint_dev_token

    monkeypatch.setenv("AKKA_OPTIMIZE_HOME", str(tmp_path))
    monkeypatch.setenv("AKKA_OPTIMIZE_CONFIG", str(tmp_path / "cfg"))
    monkeypatch.delenv("AKKA_OPTIMIZE_TOKEN", raising=False)
    secret = ensure_dev_secret(tmp_path)
    assert resolve_token("http://localhost:9001") == mint_dev_token(secret)
    assert resolve_token("http://127.0.0.1:9001") == mint_dev_token(secret)
    assert resolve_token("http://localhost:9002") is None
    assert resolve_token("https://optimize.example.com") is None


def test_a_saved_login_serves_the_local_trainer_when_no_dev_secret_is_found(
    tmp_path, monkeypatch
) -> None:
    """A second shell without the server's AKKA_OPTIMIZE_HOME: ``login`` for
    http://localhost:9001 is used (before, the saved token was never read there)."""
    from akka_optimize.cli.client import resolve_token, save_login
    from akka_optimize.devtoken import ensure_dev_secret, mint_dev_token

    monkeypatch.setenv("AKKA_OPTIMIZE_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("AKKA_OPTIMIZE_CONFIG", str(tmp_path / "cfg"))
    monkeypatch.delenv("AKKA_OPTIMIZE_TOKEN", raising=False)
    assert resolve_token("http://localhost:9001") is None
    save_login("http://localhost:9001", "ak_saved")
    assert resolve_token("http://localhost:9001") == "ak_saved"
    secret = ensure_dev_secret(tmp_path / "elsewhere")  # the server's home: dev token wins
    assert resolve_token("http://localhost:9001") == mint_dev_token(secret)


def test_no_token_error_names_the_home_and_the_ways_in(
    shared_service: LiveService, tmp_path
) -> None:
    env = shared_service.env(AKKA_OPTIMIZE_HOME=str(tmp_path / "not-the-server"))
    env.pop("AKKA_OPTIMIZE_TOKEN")
    out = shared_service.cli("training", "info", env=env)
    assert out.returncode == 1
    assert "has no token" in out.stderr and "login --token TOKEN" in out.stderr
    assert out.stderr.count("login --token") == 1


def test_service_accepts_dev_token_of_its_own_home_only(
    shared_service: LiveService, tmp_path
) -> None:
    from akka_optimize.devtoken import ensure_dev_secret, mint_dev_token

    good = mint_dev_token(ensure_dev_secret(shared_service.home))
    other = mint_dev_token(ensure_dev_secret(tmp_path / "other"))
    ok = httpx.get(
        shared_service.url + "/v1/training/info", headers={"Authorization": f"Bearer {good}"}
    )
    bad = httpx.get(
        shared_service.url + "/v1/training/info", headers={"Authorization": f"Bearer {other}"}
    )
    assert ok.status_code == 200 and bad.status_code == 401


def test_migrations_match_the_models(tmp_path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from akka_optimize.db import (
        Base,
        models,  # noqa: F401
    )
    from akka_optimize.db.base import make_engine
    from akka_optimize.db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    eng = make_engine(url)
    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    eng.dispose()
    assert diff == [], f"models differ from migrations; run scripts/regen_migration.py: {diff}"


def test_service_on_postgresql(tmp_path) -> None:
    with postgres_server() as url:
        svc = LiveService(
            home=tmp_path / "h",
            config_dir=tmp_path / "c",
            port=free_port(),
            extra_env={"AKKA_OPTIMIZE_DATABASE_URL": url},
        )
        svc.start()
        try:
            info = json.loads(svc.cli("training", "info", "-o", "json", check=True).stdout)
            assert info["stateStore"]["kind"] == "postgresql"
            assert info["startedCompletely"] is True
            assert httpx.get(svc.url + "/v1/training/info").status_code == 401
        finally:
            svc.stop()


def test_cli_without_service_says_how_to_start_it(tmp_path) -> None:
    env = base_env(tmp_path, tmp_path / "c")
    env["AKKA_OPTIMIZE_URL"] = f"http://127.0.0.1:{free_port()}"
    env["AKKA_OPTIMIZE_TOKEN"] = "ak_x"
    out = subprocess.run(
        [str(BIN / "akka-optimize"), "training", "info"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "server start" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("path", ["/v1/training/info"])
def test_503_carries_retry_after(tmp_path, path) -> None:
    svc = LiveService(
        home=tmp_path / "h",
        config_dir=tmp_path / "c",
        port=free_port(),
        extra_env={"AKKA_OPTIMIZE_STARTUP_DELAY": "5"},
    )
    svc.token = "ak_not_checkable_yet"
    svc.start(wait_started=False)
    try:
        r = httpx.get(svc.url + path, headers=svc.headers())
        assert r.status_code == 503
        assert r.headers["Retry-After"]
        assert r.json()["error"]["code"] == "unavailable"
    finally:
        svc.stop()


@pytest.mark.parametrize(
    "args",
    [
        ["registry", "models", "versions"],
        ["training", "runs", "get"],
        ["training", "projects", "create"],
        ["registry", "datasets", "register", "a/b"],
    ],
)
def test_a_missing_argument_is_a_usage_error_without_traceback(tmp_path, args) -> None:
    env = base_env(tmp_path, tmp_path / "c")
    out = subprocess.run(
        [str(BIN / "akka-optimize"), *args], env=env, capture_output=True, text=True
    )
    assert out.returncode == 2, out.stderr
    assert "Missing" in out.stderr and "Traceback" not in out.stderr


def test_every_help_example_names_the_command_as_run(tmp_path) -> None:
    env = base_env(tmp_path, tmp_path / "c")
    for cmd, prefix in (
        ([str(BIN / "akka-optimize")], "akka-optimize"),
        ([str(BIN / "akka"), "optimize"], "akka optimize"),
    ):
        for sub in (
            ["training", "runs", "get"],
            ["training", "runs", "list"],
            ["training", "endpoints", "create"],
            ["registry", "datasets", "register"],
        ):
            out = subprocess.run(cmd + sub + ["--help"], env=env, capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            assert "{prog}" not in out.stdout
            assert f"Example: {prefix} {' '.join(sub[:2])}" in " ".join(out.stdout.split())


@pytest.mark.local_stores
def test_a_worker_token_reaches_only_its_own_runs_events(shared_service: LiveService) -> None:
    # The scheduler issues attempt tokens itself (`server token create` issues only tokens
    # of existing projects), so this one is stored the way the scheduler stores them.
    import uuid

    from akka_optimize.core.auth import hash_token
    from akka_optimize.db import Database
    from akka_optimize.db.models.auth import ApiToken

    worker = "ak_worker-token-of-abc123"
    db = Database(f"sqlite:///{shared_service.home / 'state.db'}")
    with db.session() as s:
        s.add(
            ApiToken(id=uuid.uuid4().hex, token_sha256=hash_token(worker), project="worker:abc123")
        )
    db.dispose()
    headers = {"Authorization": f"Bearer {worker}"}
    r = httpx.get(shared_service.url + "/v1/training/runs", headers=headers)
    assert r.status_code == 403 and "run abc123" in r.json()["error"]["message"]
    other = httpx.post(
        shared_service.url + "/v1/training/runs/zzz/attempts/1/events",
        headers=headers,
        json={"type": "phase"},
    )
    assert other.status_code == 403
    own = httpx.post(
        shared_service.url + "/v1/training/runs/abc123/attempts/1/events",
        headers=headers,
        json={"type": "phase"},
    )
    assert own.status_code == 404  # past auth: the route says the attempt does not exist
