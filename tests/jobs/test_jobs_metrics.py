"""The operator's view (issue 54 item 7, F142): ``GET /metrics`` read with
prometheus-client's own parser while a run trains and after it ends, who may read it, the
shipped Grafana dashboard against the series the service writes, and ``training runs
grafana``'s link (or its refusal without a Grafana in the deployment file)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from akka_optimize.deployment import load_deployment
from helpers import REPO, LiveService, hold_at, release, wait_held
from jobs.jobs_helpers import run_json, setup_project, wait_state, write_plan

DASHBOARD = REPO / "deploy" / "grafana" / "akka-optimize.json"


def _scrape(svc: LiveService, token: str | None = None) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics`` as ``{(name, sorted labels): value}``, parsed by
    prometheus-client's parser (a body it cannot parse fails here)."""
    r = httpx.get(svc.url + "/metrics", headers={"Authorization": f"Bearer {token or svc.token}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels`` (None when there is none)."""
    hits = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def test_a_runs_series_move_as_it_trains_and_only_an_admin_reads_them(
    service: LiveService, tmp_path: Path
) -> None:
    setup_project(service, tmp_path)  # 8 rows, micro batch 2, one epoch: 4 updates
    plan = write_plan(tmp_path / "plan.json", epochs=1)
    hold_at(service, "step-2")  # update 1 is reported, update 2 is not
    a = run_json(service, "training", "runs", "start", "-f", str(plan))
    wait_held(service)
    b = run_json(service, "training", "runs", "start", "-f", str(plan))
    wait_state(service, b["id"], ("QUEUED",), predicate=lambda r: bool(r["queueReason"]))

    held = _scrape(service)
    run = {"run": a["id"], "project": "demo", "method": "sft"}
    assert _value(held, "akka_optimize_runs", state="RUNNING", project="demo") == 1
    assert _value(held, "akka_optimize_runs", state="QUEUED", project="demo") == 1
    assert _value(held, "akka_optimize_run_updates_total", **run) == 1
    assert _value(held, "akka_optimize_run_step", **run) == 1
    assert _value(held, "akka_optimize_run_total_steps", **run) == 4
    first_tokens = _value(held, "akka_optimize_run_trained_tokens_total", **run)
    metrics = service.api("GET", f"/v1/training/runs/{a['id']}/metrics").json()["metrics"]
    assert first_tokens == metrics[0]["totalTokens"] > 0
    assert (
        _value(held, "akka_optimize_run_tokens_per_second", **run) == metrics[0]["tokensPerSecond"]
    )
    assert _value(held, "akka_optimize_pool_devices_claimed", pool="cpu") == 1
    assert _value(held, "akka_optimize_pool_queue_length", pool="cpu") == 1
    assert _value(held, "akka_optimize_pool_queue_oldest_wait_seconds", pool="cpu") > 0

    service.cli("training", "runs", "cancel", b["id"], check=True)
    release(service)
    done = wait_state(service, a["id"], ("SUCCEEDED",))
    after = _scrape(service)
    metrics = service.api("GET", f"/v1/training/runs/{a['id']}/metrics").json()["metrics"]
    assert _value(after, "akka_optimize_run_updates_total", **run) == 4 == done["results"]["step"]
    trained = _value(after, "akka_optimize_run_trained_tokens_total", **run)
    assert trained == sum(m["totalTokens"] for m in metrics) > first_tokens
    assert _value(after, "akka_optimize_runs", state="SUCCEEDED", project="demo") == 1
    assert _value(after, "akka_optimize_runs", state="CANCELLED", project="demo") == 1
    assert _value(after, "akka_optimize_runs", state="RUNNING", project="demo") is None
    assert _value(after, "akka_optimize_pool_devices_claimed", pool="cpu") == 0
    assert _value(after, "akka_optimize_pool_queue_length", pool="cpu") == 0
    # This process timed the requests above by route template, never by raw path.
    route = "/v1/training/runs/{run_id}"
    count = "akka_optimize_http_request_duration_seconds_count"
    assert _value(after, count, method="GET", route=route, status="200") >= 2
    assert not any(a["id"] in dict(ls).get("route", "") for (_, ls) in after)

    # A project token is refused naming the action; no token at all is a 401.
    project_token = service.create_token("demo")
    r = httpx.get(service.url + "/metrics", headers={"Authorization": f"Bearer {project_token}"})
    assert r.status_code == 403
    assert r.json()["error"]["details"]["action"] == "optimize.training.projects.metrics.read"
    assert httpx.get(service.url + "/metrics").status_code == 401

    # The shipped dashboard reads only series the service writes.
    names = {n.removesuffix("_bucket").removesuffix("_count") for n, _ in after}
    names |= {"akka_optimize_endpoint_requests_total", "akka_optimize_endpoint_info"}
    names |= {"akka_optimize_endpoint_completion_tokens_total"}  # written once one answers
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    read = {m for e in exprs for m in re.findall(r"akka_optimize_[a-z_]+", e)}
    read = {m.removesuffix("_bucket").removesuffix("_count") for m in read}
    assert read <= names, sorted(read - names)
    assert len(read) >= 12
    grafana = load_deployment().grafana
    assert dash["uid"] == grafana.dashboardUid
    [panel] = [p for p in dash["panels"] if p["id"] == grafana.runPanelId]
    assert "tokens/s" in panel["title"] and all(
        'run=~"$run"' in t["expr"] for t in panel["targets"]
    )


def test_runs_grafana_links_to_the_runs_panel_or_says_there_is_no_grafana(
    service: LiveService, tmp_path: Path
) -> None:
    setup_project(service, tmp_path)
    run = run_json(service, "training", "runs", "start", "-f", str(write_plan(tmp_path / "p")))
    service.cli("training", "runs", "cancel", run["id"], check=True)  # a link needs no training
    args = ("training", "runs", "grafana", run["id"][:8], "--platform-project", "acme-prod")
    refused = service.cli(*args)
    assert refused.returncode == 1
    assert "This deployment names no Grafana" in refused.stderr
    assert "grafana.url" in refused.stderr

    dep = yaml.safe_load(Path(load_deployment().source).read_text())
    dep["grafana"] = {"url": "https://grafana.example.com/"}
    (service.home / "deployment.yaml").write_text(yaml.safe_dump(dep))
    out = service.cli(*args, check=True).stdout.strip()
    url = urlsplit(out)
    assert (url.scheme, url.netloc, url.path) == (
        "https",
        "grafana.example.com",
        "/d/akka-optimize/akka-optimize",
    )
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert q == {
        "orgId": "1",
        "var-platform_project": "acme-prod",
        "var-project": "demo",
        "var-run": run["id"],
        "viewPanel": "6",
    }
    bad = service.cli("training", "runs", "grafana", run["id"], "--platform-project", "a b")
    assert bad.returncode == 1 and "is not a platform project name" in bad.stderr


def test_endpoint_answers_count_requests_and_their_usage_tokens() -> None:
    """What the forwarding route counts per endpoint: a JSON answer's usage, and a streamed
    answer's usage chunk even when the stream cuts its lines anywhere."""
    from akka_optimize.service.metrics import PROCESS, StreamTally, count_answer

    def value(name: str, **labels: str) -> float:
        return PROCESS.get_sample_value(name, labels) or 0.0

    ep = "ep-metrics-test"
    count_answer(ep, 200, json.dumps({"usage": {"completion_tokens": 7}}).encode())
    count_answer(ep, 400, b'{"error": {"message": "no"}}')
    tally = StreamTally(ep)
    stream = (
        b'data: {"choices": [{"delta": {"content": "4"}}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}\n\n'
        b"data: [DONE]\n\n"
    )
    for i in range(0, len(stream), 7):  # cut mid-line
        tally.feed(stream[i : i + 7])
    tally.close(200)
    assert value("akka_optimize_endpoint_requests_total", endpoint=ep, status="200") == 2
    assert value("akka_optimize_endpoint_requests_total", endpoint=ep, status="400") == 1
    assert value("akka_optimize_endpoint_completion_tokens_total", endpoint=ep) == 12


COUNT_IN_ANOTHER_PROCESS = """
import sys
from akka_optimize.service.metrics import SHARED_DIR, count_answer
assert SHARED_DIR == sys.argv[1]
for i in range(int(sys.argv[2])):
    count_answer("ep-shared", 200, b'{"usage": {"completion_tokens": 3}}')
"""


def test_counters_of_several_processes_are_summed_once_from_the_shared_folder(
    tmp_path: Path,
) -> None:
    """``server start --workers N``: each process writes its counters to the supervisor's
    folder (prometheus-client's multiprocess mode) and ``/metrics`` sums the folder's files,
    those of a process gone included; live gauges would be summed too, so the process's
    own series are counters and histograms only."""
    import os
    import subprocess
    import sys

    from prometheus_client import CollectorRegistry, Gauge

    from akka_optimize.service.metrics import (
        MULTIPROC_ENV,
        PROCESS,
        exposition,
        fresh_shared_dir,
    )

    (tmp_path / "metrics-multiproc").mkdir()
    (tmp_path / "metrics-multiproc" / "counter_1.db").write_bytes(b"left by an earlier service")
    shared = fresh_shared_dir(tmp_path)
    assert list(shared.iterdir()) == [] and shared.stat().st_mode & 0o777 == 0o700
    env = {**os.environ, MULTIPROC_ENV: str(shared), "PYTHONPATH": os.pathsep.join(sys.path)}
    for n in (2, 5):  # two processes, each counting its endpoint answers, then exiting
        code = [sys.executable, "-c", COUNT_IN_ANOTHER_PROCESS, str(shared), str(n)]
        done = subprocess.run(code, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    text = exposition(CollectorRegistry(), str(shared)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert _value(samples, "akka_optimize_endpoint_requests_total", endpoint="ep-shared") == 7
    tokens = _value(samples, "akka_optimize_endpoint_completion_tokens_total", endpoint="ep-shared")
    assert tokens == 21
    assert text.count("# TYPE akka_optimize_endpoint_requests_total counter") == 1
    gauges = [m for m in PROCESS._collector_to_names if isinstance(m, Gauge)]
    assert all(g._multiprocess_mode != "all" for g in gauges)
