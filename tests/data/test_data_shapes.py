"""Row shapes from other tools (issue 16 item 11): ShareGPT and Alpaca rows are refused
with the row rewritten as messages; an OpenAI row whose assistant message has
``content: null`` beside ``tool_calls`` is accepted as empty content."""

from __future__ import annotations

import json

import pytest

from akka_optimize.data.rows import RowError, parse_row


def _rewrite(err: RowError) -> dict:
    """The ``{"messages": …}`` the refusal shows."""
    return json.loads(err.reason[err.reason.index('{"messages"') :])


def test_sharegpt_row_is_refused_with_its_messages_form():
    row = {
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "2+2?"},
            {"from": "gpt", "value": "4"},
        ]
    }
    with pytest.raises(RowError) as info:
        parse_row(row, 3)
    err = info.value
    assert err.message.startswith("line 3: messages: this is a ShareGPT row")
    rewritten = _rewrite(err)
    assert rewritten == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    }
    assert parse_row(rewritten, 3)["messages"][-1]["content"] == "4"  # the rewrite trains


def test_sharegpt_tool_turns_map_to_tool_messages():
    row = {
        "conversations": [
            {"from": "human", "value": "Weather?"},
            {"from": "function_call", "value": '{"name": "w"}'},
            {"from": "observation", "value": "sunny"},
            {"from": "gpt", "value": "Sunny."},
        ]
    }
    with pytest.raises(RowError) as info:
        parse_row(row, 1)
    roles = [m["role"] for m in _rewrite(info.value)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_alpaca_row_is_refused_with_its_messages_form():
    row = {"instruction": "Translate to French.", "input": "cat", "output": "chat"}
    with pytest.raises(RowError) as info:
        parse_row(row, 7)
    assert "line 7: messages: this is an Alpaca row" in info.value.message
    assert _rewrite(info.value)["messages"] == [
        {"role": "user", "content": "Translate to French.\n\ncat"},
        {"role": "assistant", "content": "chat"},
    ]
    with pytest.raises(RowError) as info:
        parse_row({"instruction": "Say hi.", "input": "", "output": "hi"}, 1)
    assert _rewrite(info.value)["messages"][0] == {"role": "user", "content": "Say hi."}


def test_a_long_row_is_shown_cut():
    row = {"instruction": "x" * 2000, "output": "y"}
    with pytest.raises(RowError) as info:
        parse_row(row, 1)
    assert info.value.reason.endswith("…") and len(info.value.reason) < 600


def test_openai_assistant_content_null_beside_tool_calls_is_empty_content():
    call = {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
    row = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ]
    }
    msg = parse_row(row, 1)["messages"][1]
    assert msg["tool_calls"][0]["function"]["name"] == "w"
    text = (
        msg["content"]
        if isinstance(msg["content"], str)
        else "".join(p.get("text", "") for p in msg["content"])
    )
    assert text == ""
    with pytest.raises(RowError, match="needs content"):
        parse_row({"messages": [row["messages"][0], {"role": "assistant", "content": None}]}, 1)
