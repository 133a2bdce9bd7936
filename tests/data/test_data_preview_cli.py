"""``training data preview`` through the real CLI and service (issue 5 item 6)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from helpers import LiveService

TINY = "akka-optimize/tiny-smollm2"
CASES = Path(__file__).resolve().parents[1] / "cases"
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]


def _marked(row: dict) -> list[str]:
    """The supervised segments' texts of one previewed row, in order."""
    return [s["text"] for s in row["segments"] if s["supervised"]]


def test_preview_marks_supervised_spans_through_cli_and_api(
    service: LiveService, tmp_path: Path, smollm2_tokenizer: Any
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
    assert not_selected.returncode == 1, not_selected.stderr
    assert f"Base model {TINY} is not selected; select it with" in not_selected.stderr

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
    # The segments are the row as the chat template renders it, cut where the loss starts
    # and stops: assistantTurns last marks the last answer and its end of turn, nothing else.
    rendered = smollm2_tokenizer.apply_chat_template(cases[0]["row"]["messages"], tokenize=False)
    assert "".join(s["text"] for s in first["segments"]) == rendered
    assert _marked(first) == ["Category: refund.<|im_end|>"]
    assert second["row"] == 2 and "tool calls" in second["error"]  # SmolLM2's template drops them
    assert _marked(third) == [" The answer is 4.<|im_end|>"]  # the part marked train: true
    assert first["tokens"] > first["supervised_tokens"] > 0
    assert first["supervised_tokens"] == len(
        smollm2_tokenizer.encode("Category: refund.<|im_end|>", add_special_tokens=False)
    )

    # The API marks the same spans the CLI printed, given the rows and the plan's loss.
    r = service.api(
        "POST",
        "/v1/training/data/preview",
        json={"plan": json.loads(plan.read_text()), "rows": [c["row"] for c in cases]},
    )
    assert r.status_code == 200, r.text
    assert [row.get("segments") for row in r.json()["rows"]] == [
        row.get("segments") for row in data["rows"]
    ]

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
    assert "Supervised text is between \u27e6 and \u27e7." in text
    # The default loss (assistantTurns all) marks both answers, each with its end of turn.
    assert re.findall("\u27e6(.*?)\u27e7", text.split("row 1: ", 1)[1], re.S) == [
        "Hello! What went wrong?<|im_end|>",
        "Category: refund.<|im_end|>",
    ]

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
