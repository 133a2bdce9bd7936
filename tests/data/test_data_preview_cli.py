"""``training data preview`` through the real CLI and service (issue 5 item 6)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import LiveService

TINY = "akka-optimize/tiny-smollm2"
CASES = Path(__file__).resolve().parents[1] / "cases"
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]


def test_preview_marks_supervised_spans_through_cli_and_api(
    service: LiveService, tmp_path: Path
) -> None:
    refused = service.cli(
        "training",
        "data",
        "preview",
        "-f",
        str(tmp_path / "none.jsonl"),
        "--base-model",
        TINY,
        check=False,
    )
    assert (
        refused.returncode == 2
        and "none.jsonl is not a readable file" in refused.stderr + refused.stdout
    )

    rows = tmp_path / "train.jsonl"
    cases = [
        c
        for c in GOOD
        if c["name"] in ("multi-turn-all", "tool-call-trained", "content-parts-train-flags")
    ]
    rows.write_text("\n".join(json.dumps(c["row"]) for c in cases) + "\n")
    not_selected = service.cli(
        "training", "data", "preview", "-f", str(rows), "--base-model", TINY, check=False
    )
    assert not_selected.returncode != 0

    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"baseModel": TINY, "config": {"loss": {"assistantTurns": "last"}}}))
    out = service.cli(
        "training",
        "data",
        "preview",
        "-f",
        str(rows),
        "--plan",
        str(plan),
        "--rows",
        "3",
        "-o",
        "json",
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["loss"] == {
        "assistantTurns": "last",
        "trainOnToolCalls": True,
        "trainOnToolResults": False,
    }
    first, second, third = data["rows"]
    supervised = "".join(s["text"] for s in first["segments"] if s["supervised"])
    assert supervised == "Category: refund.<|im_end|>"  # assistantTurns last
    assert "Hello! What went wrong?" in "".join(s["text"] for s in first["segments"])
    assert second["row"] == 2 and "tool calls" in second["error"]  # SmolLM2's template drops them
    assert (
        "".join(s["text"] for s in third["segments"] if s["supervised"])
        == " The answer is 4.<|im_end|>"
    )
    assert first["tokens"] > first["supervised_tokens"] > 0

    text = service.cli(
        "training",
        "data",
        "preview",
        "-f",
        str(rows),
        "--base-model",
        TINY,
        "--rows",
        "1",
        check=True,
    ).stdout
    assert "row 1: " in text and "\u27e6Hello! What went wrong?<|im_end|>\u27e7" in text

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [\n' + json.dumps(GOOD[0]["row"]) + "\n")
    r = service.api(
        "POST",
        "/v1/training/data/preview",
        json={"baseModel": TINY, "jsonl": bad.read_text(), "filename": "bad.jsonl"},
    )
    assert r.status_code == 400 and "line 1: not valid JSON" in r.json()["error"]["message"]
    r = service.api(
        "POST",
        "/v1/training/data/preview",
        json={"baseModel": TINY, "rows": [GOOD[0]["row"]], "rowCount": 0},
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "rowCount"
