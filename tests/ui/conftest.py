"""Fixtures of the dashboard tests: one live service with finished tiny-model runs
(a source run with validation, a branch of it, a reinforcement run), the project's
evaluation settings with the evaluation of each registered model, an endpoint over the
trained model, and a real Chromium driven by Playwright (Debian's ``/usr/bin/chromium``; no
browser download).

Without Chromium or Playwright the tests are skipped with the reason, except in CI
(``CI=true``), where ``.ci/run`` installs Chromium and a missing browser fails.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_helpers import Dashboard, plan_file

from helpers import REPO, LiveService, free_port

CHROMIUM = (
    os.environ.get("AKKA_OPTIMIZE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
TINY = "akka-optimize/tiny-smollm2"


def _browser_missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium browser for one test module. Not session-wide: Playwright's
    sync API keeps an asyncio loop running on the main thread while it is open, and a
    later module of the same worker that calls ``asyncio.run`` would fail."""
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"The browser tests must run in CI: {missing}.")
        pytest.skip(f"browser tests skipped: {missing}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory, chromium) -> Iterator[Dashboard]:
    """A service with a finished run, its one-update branch and a READY endpoint."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "jobs"))
    from jobs_helpers import DIGITS_REWARD, gsm8k_rows, write_rl_plan

    tmp = tmp_path_factory.mktemp("ui")
    svc = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port())
    svc.start()
    try:
        svc.cli("training", "projects", "create", "demo", check=True)
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        train = gsm8k_rows(tmp / "train.jsonl", 8, system="Answer with #### N.")
        val = gsm8k_rows(tmp / "val.jsonl", 4, offset=8, system="Answer with #### N.")
        svc.cli("registry", "datasets", "register", "demo/train", "-f", str(train), check=True)
        svc.cli("registry", "datasets", "register", "demo/val", "-f", str(val), check=True)
        bundle = tmp / "scoring"
        bundle.mkdir()
        (bundle / "reward.py").write_text(DIGITS_REWARD)
        svc.cli("registry", "bundles", "register", "demo/scoring", "-f", str(bundle), check=True)
        # Every model the runs register is then evaluated on these settings.
        svc.cli("training", "projects", "set-evaluation", "demo", "--dataset", "demo/val",
                "--grader", "bundle:demo/scoring#reward", "--max-tokens", "8", check=True)  # fmt: skip
        d = Dashboard(svc=svc, source={}, branch={}, endpoint={}, tmp=tmp)
        start = ("training", "runs", "start", "-f", str(plan_file(tmp / "plan.json")), "--wait")
        d.source = d.cli_json(*start)
        assert d.source["state"] == "SUCCEEDED", d.source
        grid = tmp / "grid.json"
        grid.write_text(json.dumps({"config.hyperparams.optimizer.learningRate": [0.002]}))
        # The branch trains while the endpoint starts (both mostly wait on loading).
        sweep = d.cli_json(
            "training", "runs", "sweep", d.source["id"][:8], "--snapshot", "step-4",
            "--steps", "1", "--grid", str(grid),
        )  # fmt: skip
        model = d.source["results"]["model"].split("@")[0]
        d.endpoint = d.cli_json("training", "endpoints", "create", "--model", model, "--wait")
        assert d.endpoint["state"] == "READY", d.endpoint
        branch_id = sweep["points"][0]["run"]["id"]
        d.branch = d.cli_json("training", "runs", "wait", branch_id)
        assert d.branch["state"] == "SUCCEEDED", d.branch
        rl_plan = write_rl_plan(tmp / "rl.json", model_name="tiny-rl")
        rl = ("training", "runs", "start", "-f", str(rl_plan), "--wait")
        d.rl = d.cli_json(*rl)
        assert d.rl["state"] == "SUCCEEDED", d.rl
        d.evaluations = _evaluations_finished(d, 3)
        yield d
    finally:
        svc.stop()


def _evaluations_finished(d: Dashboard, count: int, timeout: float = 600) -> list[dict]:
    """The project's evaluations once ``count`` exist and all have ended (one per model
    the runs registered, queued by the project's settings)."""
    deadline = time.monotonic() + timeout
    while True:
        evs = d.cli_json("training", "evaluations", "list", "--project", "demo")["evaluations"]
        if len(evs) >= count and all(e["state"] in ("SUCCEEDED", "FAILED") for e in evs):
            return evs
        assert time.monotonic() < deadline, evs
        time.sleep(1)
