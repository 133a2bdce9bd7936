"""OpenAI files as registry dataset versions.

An uploaded file (``POST /v1/files``, ``purpose: fine-tune``) is converted line by line to
this platform's rows (:mod:`akka_optimize.data.rows`) and registered as a version of the
dataset ``PROJECT/openai-files`` (:data:`DATASET`); its ID is ``file-PROJECT-vN`` and
resolves back to ``PROJECT/openai-files:vN@sha256:…``. The bytes as uploaded are kept as a
blob (``GET /v1/files/{id}/content`` answers them) and the file's OpenAI fields live in
the version's annotation ``openai-file``.

The three OpenAI JSONL formats (platform.openai.com/docs/api-reference/fine-tuning):

- chat supervised: ``{"messages": [... ending with assistant], "tools"?,
  "parallel_tool_calls"?}``; an assistant message's ``weight`` 0 is a turn not trained on
  (its text part ``train: false``); ``developer`` is a system message;
- reinforcement: ``{"messages": [... ending with user or developer], FIELD: value ...}``:
  every other field is a reference field a grader reads as ``{{item.FIELD}}``, kept as the
  row's ``ground_truth`` object;
- preference (DPO): ``{"input": {"messages", "tools"?}, "preferred_output": [assistant
  message], "non_preferred_output": [assistant message]}``: stored in that same shape (the
  roles mapped as above), a preference pair the data layer reads natively
  (:mod:`akka_optimize.data.preference_rows`) and a ``dpo`` job trains on.

A file mixes no formats; a bad line is refused naming its number and what is wrong, and
nothing is registered.
"""

from __future__ import annotations

import json
from typing import Any

from ...data.rows import RowError, parse_row
from .errors import OpenAIError

DATASET = "openai-files"
"""The dataset (in the caller's project) whose versions are the uploaded files."""
ANNOTATION = "openai-file"
"""The version annotation holding a file's OpenAI fields."""
PURPOSES = ("fine-tune",)
"""The purposes accepted; others (``assistants``, ``batch``, ``vision``...) are refused."""
KINDS = ("supervised", "reinforcement", "dpo")
_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_SFT_EXTRA = ("tools", "parallel_tool_calls")


def _bad(line: int, what: str) -> OpenAIError:
    return OpenAIError(f"Invalid file format. Line {line}: {what}.", "file", "invalid_file_format")


def _message(m: Any, line: int, where: str) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise _bad(line, f"{where} is not a message object")
    role = m.get("role")
    if role not in _ROLES:
        raise _bad(line, f"{where}.role {role!r} is not one of {', '.join(_ROLES)}")
    out = {k: v for k, v in m.items() if k != "weight"}
    out["role"] = _ROLES[role]
    if "weight" in m:
        if role != "assistant" or m["weight"] not in (0, 1):
            raise _bad(line, f"{where}.weight must be 0 or 1, on an assistant message")
        if m["weight"] == 0 and isinstance(m.get("content"), str):
            out["content"] = [{"type": "text", "text": m["content"], "train": False}]
    return out


def _messages(ms: Any, line: int, where: str) -> list[dict[str, Any]]:
    if not isinstance(ms, list) or not ms:
        raise _bad(line, f"{where} must be a non-empty list of messages")
    return [_message(m, line, f"{where}[{i}]") for i, m in enumerate(ms)]


def convert_row(obj: Any, line: int) -> tuple[str, dict[str, Any]]:
    """One OpenAI JSONL row as ``(kind, platform row)`` (the module docstring's mapping).

    Raises:
        OpenAIError: ``invalid_file_format`` naming the line and field.
    """
    if not isinstance(obj, dict):
        raise _bad(line, f"a row must be a JSON object, not {type(obj).__name__}")
    if "input" in obj or "preferred_output" in obj:
        for k in set(obj) - {"input", "preferred_output", "non_preferred_output"}:
            raise _bad(line, f"unknown field {k!r} in a preference row")
        inp = obj.get("input")
        if not isinstance(inp, dict):
            raise _bad(line, "input must be an object with messages")
        for k in set(inp) - {"messages", *_SFT_EXTRA}:
            raise _bad(line, f"unknown field input.{k}")
        msgs = _messages(inp.get("messages"), line, "input.messages")
        pref = _messages(obj.get("preferred_output"), line, "preferred_output")
        other = _messages(obj.get("non_preferred_output"), line, "non_preferred_output")
        if [m["role"] for m in pref + other] != ["assistant"] * (len(pref) + len(other)):
            raise _bad(line, "preferred_output and non_preferred_output hold assistant messages")
        row: dict[str, Any] = {
            "input": {"messages": msgs},
            "preferred_output": pref,
            "non_preferred_output": other,
        }
        if inp.get("tools"):
            row["input"]["tools"] = inp["tools"]
        return "dpo", row
    if "messages" not in obj:
        raise _bad(line, "missing messages (or input/preferred_output/non_preferred_output)")
    msgs = _messages(obj["messages"], line, "messages")
    if msgs[-1]["role"] == "assistant":
        for k in set(obj) - {"messages", *_SFT_EXTRA}:
            raise _bad(
                line, f"unknown field {k!r} in a supervised row (messages ending with assistant)"
            )
        row = {"messages": msgs}
        if obj.get("tools"):
            row["tools"] = obj["tools"]
        return "supervised", row
    if msgs[-1]["role"] not in ("user", "system"):
        raise _bad(line, f"messages end with a {msgs[-1]['role']} message")
    refs = {k: v for k, v in obj.items() if k not in ("messages", "tools")}
    row = {"messages": msgs, "ground_truth": refs}
    if obj.get("tools"):
        row["tools"] = obj["tools"]
    return "reinforcement", row


def convert_file(data: bytes) -> tuple[str, list[dict[str, Any]]]:
    """A whole upload as ``(kind, rows)``; every row is checked by the platform's own row
    parser too (:func:`akka_optimize.data.rows.parse_row`), so a row the registry would
    refuse is refused here with its line.

    Raises:
        OpenAIError: ``invalid_file_format``: not UTF-8, a line that is not JSON, a bad row,
            rows of two formats, or no rows.
    """

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OpenAIError(
            f"Invalid file format. The file is not UTF-8 (byte {exc.start}).",
            "file",
            "invalid_file_format",
        ) from None
    kind, rows = None, []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise _bad(n, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        k, row = convert_row(obj, n)
        if kind is not None and k != kind:
            raise _bad(n, f"a {k} row in a file of {kind} rows; one file holds one format")
        kind = k
        try:
            parse_row(row, n)
        except RowError as exc:
            raise _bad(n, exc.message.removeprefix(f"line {n}: ")) from None
        rows.append(row)
    if kind is None:
        raise OpenAIError(
            "Invalid file format. The file holds no rows.", "file", "invalid_file_format"
        )
    return kind, rows


def file_id(project: str, version: int) -> str:
    """``file-PROJECT-vN``: the ID of version N of ``PROJECT/openai-files``."""
    return f"file-{project}-v{version}"


def parse_file_id(fid: Any, param: str = "file_id") -> tuple[str, int]:
    """``(project, version)`` of a file ID.

    Raises:
        OpenAIError: 404 ``file_not_found`` for anything else (OpenAI answers a bad ID so).
    """
    if isinstance(fid, str) and fid.startswith("file-") and "-v" in fid:
        project, _, v = fid.removeprefix("file-").rpartition("-v")
        if project and v.isdigit():
            return project, int(v)
    raise OpenAIError(f"No such File object: {fid}", param, "file_not_found", 404)


def file_object(
    project: str, version: int, note: dict[str, Any], created_at: int
) -> dict[str, Any]:
    """OpenAI's ``FileObject`` of a registered file: ``{"id", "object": "file", "bytes",
    "created_at", "filename", "purpose", "status": "processed", "status_details"}``;
    ``status_details`` says which dataset version holds it."""
    return {
        "id": file_id(project, version),
        "object": "file",
        "bytes": int(note["bytes"]),
        "created_at": created_at,
        "filename": note["filename"],
        "purpose": note["purpose"],
        "status": "processed",
        "expires_at": None,
        "status_details": f"{note['kind']} rows, registered as {project}/{DATASET}:v{version}",
    }
