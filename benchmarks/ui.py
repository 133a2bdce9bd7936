"""Dashboard benchmark: the run page of a 1,000-update run, loaded in a real Chromium
(issue 27 "Checks": under 1 s on this machine with the whole curve drawn).

A fresh service trains a real 4-update run of the tiny model; its recorded metrics are
then repeated, step after step, to 1,000 updates in the service's own state store
(training 1,000 updates, even of the tiny model, takes far longer than the page is
worth measuring; the page reads the rows the same way either way). Each round opens
the run page in a new browser tab and stops when all four charts hold 1,000 points
and a frame has been drawn; the value is the page's own ``performance.now()`` then,
i.e. from the start of navigation. The baseline is one ``GET …/metrics`` of the same
run over HTTP (the largest answer the page waits for); ratio = page / that request.

Needs Debian's ``chromium`` and the ``playwright`` package (``pip install -e '.[dev]'``);
without them it reports nothing and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

UPDATES = 1000
ROUNDS = 5
TINY = "akka-optimize/tiny-smollm2"
CHARTS = ["chart-loss", "chart-lr", "chart-grad", "chart-ratio"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(env: dict[str, str], *args: str) -> str:
    exe = str(Path(sys.executable).parent / "akka-optimize")
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, check=True).stdout


def _train_run(env: dict[str, str], root: Path) -> str:
    rows = [json.loads(x) for x in Path("data/gsm8k/train.jsonl").open()][:8]
    data = root / "train.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": r["question"]},
                        {"role": "assistant", "content": r["answer"]},
                    ]
                }
            )
            + "\n"
            for r in rows
        )
    )
    _cli(env, "training", "projects", "create", "bench")
    _cli(env, "training", "base-models", "select", TINY, "--wait")
    _cli(env, "registry", "datasets", "register", "bench/train", "-f", str(data))
    plan = {
        "kind": "run",
        "project": "bench",
        "baseModel": TINY,
        "config": {
            "dataset": "bench/train",
            "method": "sft",
            "maxSeqLength": 512,
            "hyperparams": {"training": {"epochs": 1, "microBatchPerGpu": 2}},
        },
    }
    (root / "plan.json").write_text(json.dumps(plan))
    out = _cli(
        env, "training", "runs", "start", "-f", str(root / "plan.json"), "--wait", "-o", "json"
    )
    return json.loads(out)["id"]


def _extend_metrics(home: Path, run_id: str) -> None:
    """Repeat the run's recorded metrics rows up to :data:`UPDATES` steps (see module doc)."""
    from sqlalchemy import select

    from akka_optimize.db import Database
    from akka_optimize.db.models.jobs import Run, RunMetric

    db = Database(f"sqlite:///{home / 'state.db'}")
    try:
        with db.session() as s:
            rows = s.scalars(select(RunMetric).where(RunMetric.run_id == run_id)).all()
            recorded = [r for r in rows if r.kind == "metrics"]
            for step in range(len(recorded) + 1, UPDATES + 1):
                like = recorded[(step - 1) % len(recorded)]
                s.add(
                    RunMetric(
                        run_id=run_id, attempt=like.attempt, kind="metrics", step=step,
                        values=dict(like.values),
                    )
                )  # fmt: skip
            run = s.get(Run, run_id)
            run.current_step = run.total_steps = UPDATES
    finally:
        db.dispose()


def _measure(url: str, token: str, run_id: str, chromium: str) -> list[float]:
    from playwright.sync_api import sync_playwright

    done = " && ".join(
        f"AK.charts['{c}'] && AK.charts['{c}'].data[0].length === {UPDATES}" for c in CHARTS
    )
    times = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        context.add_cookies([{"name": "akka_optimize_token", "value": token, "url": url + "/ui"}])
        for _ in range(ROUNDS + 1):  # the first round warms the service and the cache
            page = context.new_page()
            page.goto(f"{url}/ui/runs/{run_id}", wait_until="commit")
            page.wait_for_function(f"typeof AK !== 'undefined' && {done}", timeout=60_000)
            ms = page.evaluate(
                "new Promise(r => requestAnimationFrame(() => r(performance.now())))"
            )
            times.append(float(ms))
            page.close()
        browser.close()
    return times[1:]


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure the run page's load time; see the module docstring."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("ui: skipped, the playwright package is not installed")
        return []
    if not Path(chromium).exists():
        print("ui: skipped, no chromium (apt-get install chromium)")
        return []
    root = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    home, port = root / "home", _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AKKA_")}
    env.update(AKKA_OPTIMIZE_HOME=str(home), AKKA_OPTIMIZE_CONFIG=str(root / "config"))
    env.update(AKKA_OPTIMIZE_URL=f"http://127.0.0.1:{port}", HF_HUB_OFFLINE="1")
    exe = str(Path(sys.executable).parent / "akka-optimize")
    log = open(root / "server.log", "wb")
    server = subprocess.Popen(
        [exe, "server", "start", "--port", str(port), "--log-level", "warning", "--workers", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        token = _cli(env, "server", "token", "create").strip().splitlines()[-1]
        env["AKKA_OPTIMIZE_TOKEN"] = token
        run_id = _train_run(env, root)
        _extend_metrics(home, run_id)
        headers = {"Authorization": f"Bearer {token}"}
        t = time.perf_counter()
        got = httpx.get(f"{url}/v1/training/runs/{run_id}/metrics", headers=headers).json()
        json_ms = (time.perf_counter() - t) * 1000
        assert len(got["metrics"]) == UPDATES, len(got["metrics"])
        times = sorted(_measure(url, token, run_id, chromium))
        median = times[len(times) // 2]
        return [
            {
                "name": f"ui.run_page_{UPDATES}_updates",
                "value": round(median, 1),
                "unit": "ms (median)",
                "baseline": round(json_ms, 1),
                "ratio": round(median / json_ms, 2),
                "detail": f"rounds {', '.join(f'{x:.0f}' for x in times)} ms; goal < 1000 ms; "
                "baseline: one GET of the run's metrics",
            }
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        shutil.rmtree(root, ignore_errors=True)
