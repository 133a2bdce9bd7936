"""The dashboard in a real browser (issue 27): what a person checks on each page
equals what the CLI says about the same run, model or endpoint."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator

import httpx
import pytest
from ui_helpers import Dashboard

from akka_optimize.ui.pages import COOKIE

# The module's service trains two runs and starts an endpoint before its first test:
# minutes on a loaded 2-core machine, more than the suite's 600 s per test.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture
def page(chromium, dashboard: Dashboard) -> Iterator:
    """A logged-in page (the token in the dashboard's cookie) that records console errors;
    each test ends by asserting there were none."""
    context = chromium.new_context(viewport={"width": 1280, "height": 1000})
    context.add_cookies(
        [
            {
                "name": COOKIE,
                "value": dashboard.svc.token,
                "url": dashboard.svc.url + "/ui",
                "sameSite": "Strict",
            }
        ]
    )
    p = context.new_page()
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.set_default_timeout(30_000)
    p.console_errors = errors  # a test that expects a refused request removes its own
    yield p
    context.close()
    assert errors == [], errors


def test_login_form_instead_of_a_traceback_then_the_token_opens_the_pages(
    chromium, dashboard: Dashboard
) -> None:
    svc = dashboard.svc
    bare = httpx.get(f"{svc.url}/ui/runs/{dashboard.source['id']}")
    assert bare.status_code == 401 and 'name="token"' in bare.text
    assert "Traceback" not in bare.text

    context = chromium.new_context()
    p = context.new_page()
    p.goto(f"{svc.url}/ui/runs/{dashboard.source['id'][:8]}")
    p.fill("#token", "ak_not-a-token")
    p.click("#login button")
    assert (
        p.locator("#login-message").inner_text() == "The bearer token is not known to this service."
    )
    p.fill("#token", svc.token)
    p.click("#login button")
    # Back on the page asked for, which now shows the run.
    p.wait_for_selector("#run-state")
    assert p.locator("#run-id").inner_text() == dashboard.source["id"]
    cookie = next(c for c in context.cookies() if c["name"] == COOKIE)
    assert cookie["path"] == "/ui" and cookie["sameSite"] == "Strict"
    assert not cookie["httpOnly"]  # the page's script sends it as the bearer token
    p.click("form.logout button")
    p.wait_for_selector("#token")
    assert all(c["name"] != COOKIE for c in context.cookies())
    context.close()


def test_the_development_token_link_of_server_start_logs_in(chromium, dashboard: Dashboard) -> None:
    from akka_optimize.cli.server import dashboard_lines
    from akka_optimize.devtoken import dev_secret_path

    secret = dev_secret_path(dashboard.svc.home).read_text().strip().encode()
    lines = dashboard_lines("127.0.0.1", dashboard.svc.port, secret).splitlines()
    assert lines[0] == f"Dashboard: {dashboard.svc.url}/ui/"
    link = lines[1].split(": ", 1)[1]
    assert "#token=dev_" in link
    context = chromium.new_context()
    p = context.new_page()
    p.goto(link)
    p.wait_for_selector("section.project[data-project=demo]")
    assert "#token" not in p.url
    context.close()
    # Bound to every address, the link is not printed.
    assert len(dashboard_lines("0.0.0.0", 9001, secret).splitlines()) == 1


def _shown(x: float) -> str:
    """``x`` as the page prints numbers (JavaScript's ``toPrecision(4)``)."""
    return f"{x:#.4g}"


def _chart(page, chart_id: str) -> list[list]:
    page.wait_for_function(f"AK.charts['{chart_id}'] !== undefined")
    return page.evaluate(f"AK.charts['{chart_id}'].data.map(c => Array.from(c))")


def test_run_page_draws_the_metrics_settings_snapshots_and_lineage(
    page, dashboard: Dashboard
) -> None:
    src = dashboard.source
    page.goto(f"{dashboard.svc.url}/ui/runs/{src['id'][:8]}")
    page.wait_for_selector("#snapshots tbody")
    m = dashboard.cli_json("training", "runs", "metrics", src["id"])
    assert [x["step"] for x in m["metrics"]] == [1, 2, 3, 4]
    assert [x["step"] for x in m["validation"]] == [2, 4]

    steps, loss, validation = _chart(page, "chart-loss")
    assert steps == [1, 2, 3, 4]
    assert len([v for v in loss if v is not None]) == len(m["metrics"])
    assert loss[-1] == m["metrics"][-1]["loss"] == m["finalLoss"]
    assert [v for v in validation if v is not None] == [x["loss"] for x in m["validation"]]
    for chart_id, key in (
        ("chart-lr", "learningRate"),
        ("chart-grad", "gradNorm"),
        ("chart-ratio", "updateRatio"),
    ):
        assert _chart(page, chart_id)[1] == [x[key] for x in m["metrics"]], chart_id
    assert page.locator("#chart-loss .u-legend").count() == 1  # hover values
    assert page.locator("#chart-reward").is_hidden()  # a supervised run has no reward

    # The settings as `runs get --settings` prints them; the plan's own values marked.
    text = dashboard.svc.cli("training", "runs", "get", src["id"], "--settings", check=True)
    cli_stated = set(re.findall(r"(?<= )(\w+)=\S+?\*", text.stdout))
    shown = page.locator("#settings .setting.stated").all_inner_texts()
    page_stated = {s.split("=", 1)[0] for s in shown}
    assert page_stated == cli_stated
    assert {"epochs", "microBatchPerGpu", "seed", "learningRate", "saveEverySteps"} <= page_stated
    assert "epochs=1*" in shown and "validationFrequencySteps=2*" in shown
    assert "validationDataset" in page_stated  # config.data, stated as a name

    snaps = dashboard.cli_json("training", "runs", "snapshots", src["id"])["snapshots"]
    rows = page.locator("#snapshots tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == [s["name"] for s in snaps] == ["step-2", "step-4"]
    state_kib = f"{snaps[-1]['bytes']['state'] / 1024:.1f} KiB"
    assert state_kib in rows[-1]

    shot = dashboard.tmp / "run-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if (keep := os.environ.get("AKKA_OPTIMIZE_UI_SCREENSHOT")) is not None:
        shutil.copy(shot, keep)

    # The lineage: the branch is linked from its source, and back.
    branch = dashboard.branch
    page.click(f"#branches a[href='/ui/runs/{branch['id']}']")
    page.wait_for_selector("#ancestry")
    assert page.locator("#run-id").inner_text() == branch["id"]
    assert page.locator(f"#ancestry a[href='/ui/runs/{src['id']}']").count() == 1
    bm = dashboard.cli_json("training", "runs", "metrics", branch["id"])
    assert _chart(page, "chart-loss")[0] == [x["step"] for x in bm["metrics"]] == [5]


def test_a_reinforcement_runs_page_draws_its_reward_curve(page, dashboard: Dashboard) -> None:
    rl = dashboard.rl
    page.goto(f"{dashboard.svc.url}/ui/runs/{rl['id'][:8]}")
    page.wait_for_selector("#snapshots tbody")
    m = dashboard.cli_json("training", "runs", "metrics", rl["id"])["metrics"]
    assert [x["step"] for x in m] == [1, 2, 3]
    steps, mean, low, high = _chart(page, "chart-reward")
    assert steps == [1, 2, 3] and page.locator("#chart-reward").is_visible()
    assert mean == [x["rewardMean"] for x in m]
    assert low == [x["rewardMin"] for x in m] and high == [x["rewardMax"] for x in m]
    res = rl["results"]
    assert (res["rewardStart"], res["rewardFinal"]) == (m[0]["rewardMean"], m[-1]["rewardMean"])
    shown = page.locator("#run-reward").inner_text()
    assert shown == f"{_shown(res['rewardStart'])} → {_shown(res['rewardFinal'])}", shown
    assert "bundle:demo/scoring:v1#reward" in page.locator("#summary").inner_text()


def test_two_runs_overlaid_on_one_chart(page, dashboard: Dashboard) -> None:
    src, branch = dashboard.source, dashboard.branch
    page.goto(f"{dashboard.svc.url}/ui/runs/{src['id']}")
    page.wait_for_selector("#snapshots tbody")
    page.fill("#compare-with", branch["id"][:8])
    page.click("#compare-form button")
    page.wait_for_selector("#compare-runs tbody")
    steps, a, b = _chart(page, "chart-overlay")
    m_src = dashboard.cli_json("training", "runs", "metrics", src["id"])["metrics"]
    m_b = dashboard.cli_json("training", "runs", "metrics", branch["id"])["metrics"]
    assert steps == [1, 2, 3, 4, 5]
    assert a == [x["loss"] for x in m_src] + [None]
    assert b == [None] * 4 + [m_b[0]["loss"]]


def test_a_project_token_sees_only_its_own_project(chromium, dashboard: Dashboard) -> None:
    """Logged in with a token of project ``other``: the projects page and the registry show
    only that project, and a run of ``demo`` is as unknown as a run that does not exist."""
    svc = dashboard.svc
    svc.cli("training", "projects", "create", "other", check=True)
    token = svc.create_token("other")
    context = chromium.new_context()
    p = context.new_page()
    p.goto(f"{svc.url}/ui/")
    p.fill("#token", token)
    p.click("#login button")
    p.wait_for_selector("section.project")
    names = [s.get_attribute("data-project") for s in p.locator("section.project").all()]
    assert names == ["other"]
    scores = p.locator("section.project table.scores").inner_text()
    assert scores.startswith("No evaluation settings, so no scores; set them with")
    assert "· other" in p.locator("header .who").inner_text()
    p.goto(f"{svc.url}/ui/registry")
    p.wait_for_selector("#datasets caption, #datasets tbody")
    assert "demo/" not in p.locator("main").inner_text()
    src = dashboard.source["id"]
    p.goto(f"{svc.url}/ui/runs/{src}")
    p.wait_for_selector("#error:not([hidden])")
    assert p.locator("#error").inner_text() == f"No run '{src}'."
    context.close()


def test_unknown_run_prefix_or_project_shows_the_services_sentence(
    page, dashboard: Dashboard
) -> None:
    page.goto(f"{dashboard.svc.url}/ui/runs/ffffffffzz")
    page.wait_for_selector("#error:not([hidden])")
    assert page.locator("#error").inner_text() == "No run 'ffffffffzz'."
    assert page.locator("#run").is_hidden()
    page.goto(f"{dashboard.svc.url}/ui/projects/nope")
    page.wait_for_selector("#error:not([hidden])")
    assert page.locator("#error").inner_text().startswith("No training project 'nope';")
    assert page.locator("section.project").count() == 0
    # Chromium logs each refused request; those two and nothing else.
    assert (
        page.console_errors
        == ["Failed to load resource: the server responded with a status of 404 (Not Found)"] * 2
    )
    page.console_errors.clear()


def test_projects_page_lists_runs_models_and_endpoints(page, dashboard: Dashboard) -> None:
    page.goto(f"{dashboard.svc.url}/ui/")
    sec = page.locator("section.project[data-project=demo]")
    sec.wait_for()
    runs = sec.locator("table.runs tbody tr").all_inner_texts()
    assert len(runs) == 3
    src_row = next(r for r in runs if r.startswith(dashboard.source["id"][:8]))
    final = dashboard.source["results"]["finalLoss"]
    assert "SUCCEEDED" in src_row and "4/4" in src_row and f"{final:.4g}" in src_row
    assert f"{dashboard.source['results']['validationLoss']:.4g}" in src_row
    assert "demo/tiny-smollm2:v1" in src_row
    assert "demo/tiny-smollm2" in sec.locator("table.models").inner_text()
    assert dashboard.endpoint["id"][:8] in sec.locator("table.endpoints").inner_text()
    rl_row = next(r for r in runs if r.startswith(dashboard.rl["id"][:8]))
    res = dashboard.rl["results"]
    assert f"{_shown(res['rewardStart'])} → {_shown(res['rewardFinal'])}" in rl_row
    assert "demo/tiny-rl:v1" in rl_row


def test_projects_page_shows_the_evaluations_and_the_scores_table(
    page, dashboard: Dashboard
) -> None:
    """Each model the runs registered was evaluated on the project's settings; the
    evaluations table and the scores table say what the CLI says."""
    page.goto(f"{dashboard.svc.url}/ui/projects/demo")
    sec = page.locator("section.project[data-project=demo]")
    sec.wait_for()
    evs = dashboard.evaluations
    assert {e["model"] for e in evs} == {
        "demo/tiny-smollm2:v1", "demo/tiny-smollm2:v2", "demo/tiny-rl:v1"
    }  # fmt: skip
    rows = sec.locator("table.evaluations tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == [e["id"][:8] for e in evs]  # newest first
    for row, e in zip(rows, evs, strict=True):
        assert e["state"] == "SUCCEEDED" and e["model"] in row, e
        assert _shown(e["results"]["mean"]) in row and "bundle:demo/scoring:v1#reward" in row

    scores = dashboard.cli_json("training", "projects", "scores", "demo")
    (group,) = scores["rows"]
    shown = sec.locator("table.scores tbody tr").all_inner_texts()
    assert len(shown) == len(group["models"]) == 3
    assert shown[0].split("\t")[0] == group["baseModel"] == "akka-optimize/tiny-smollm2:v1"
    for row, m in zip(shown, group["models"], strict=True):  # best mean first, as the CLI
        cells = row.split("\t")
        assert cells[1:4] == [m["model"], _shown(m["mean"]), _shown(m["stderr"])], row
    hint = sec.locator("p.hint").inner_text()
    assert hint == f"on {scores['dataset']} graded by {scores['grader']}"


def test_dataset_page_previews_the_supervised_spans_of_training_data_preview(
    page, dashboard: Dashboard
) -> None:
    page.goto(f"{dashboard.svc.url}/ui/registry")
    page.click("#datasets a[href='/ui/registry/datasets/demo/train']")
    page.wait_for_selector(".preview-row")
    assert page.locator("#versions tbody tr").count() == 1
    cli = dashboard.cli_json(
        "training", "data", "preview", "--dataset", "demo/train", "--base-model",
        "akka-optimize/tiny-smollm2", "--rows", "3",
    )  # fmt: skip
    assert [r["row"] for r in cli["rows"]] == [1, 2, 3]
    assert page.locator(".preview-row").count() == 3
    for row in cli["rows"]:
        shown = page.locator(f".preview-row[data-row='{row['row']}'] .supervised")
        supervised = [s["text"] for s in row["segments"] if s["supervised"]]
        assert supervised and shown.all_inner_texts() == supervised


def test_model_page_shows_versions_lineage_and_links_to_the_run(page, dashboard: Dashboard) -> None:
    page.goto(f"{dashboard.svc.url}/ui/registry/models/demo/tiny-smollm2")
    page.wait_for_selector("#versions tbody")
    rows = page.locator("#versions tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == ["v1", "v2"]
    page.click(f"#versions a[href='/ui/runs/{dashboard.branch['id']}']")
    page.wait_for_selector("#run-state")
    assert page.locator("#run-id").inner_text() == dashboard.branch["id"]


def test_chat_box_gets_the_endpoints_answer(page, dashboard: Dashboard) -> None:
    ep = dashboard.endpoint
    page.goto(f"{dashboard.svc.url}/ui/endpoints")
    page.click(f"#endpoints a[href='/ui/endpoints/{ep['id']}']")
    page.wait_for_selector("#endpoint-state")
    assert page.locator("#endpoint-state").inner_text() == "READY"
    model = ep["models"][0]["model"]
    assert page.locator("#chat-model").input_value() == model
    page.fill("#chat-input", "Tom has 3 apples and buys 5 more. How many?")
    page.click("#chat-send")
    answer = page.locator(".chat-answer").first
    answer.wait_for()
    direct = dashboard.svc.api(
        "POST",
        f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
        json={
            "model": model,
            "messages": [
                {"role": "user", "content": "Tom has 3 apples and buys 5 more. How many?"}
            ],
            "max_tokens": 64,
            "temperature": 0,
        },
    ).json()
    content = direct["choices"][0]["message"]["content"]
    assert content and answer.text_content() == content  # the raw text, whitespace and all
    # The tiny model's answer may be only whitespace; the page says so rather than
    # showing an empty box.
    blank = page.locator(".chat-blank")
    assert blank.count() == (1 if not content.strip() else 0)
