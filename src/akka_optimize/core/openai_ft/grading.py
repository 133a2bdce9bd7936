"""OpenAI's grader objects: their check and their score for one sample (standard library
only: this file, :mod:`.formula` and :mod:`.similarity` are copied into a reinforcement
run's reward bundle, :mod:`.bundle`).

A grader (platform.openai.com/docs/api-reference/graders) is one of ``string_check``,
``text_similarity``, ``python``, ``score_model``, ``label_model`` or ``multi``. Templates
in ``input``/``reference``/messages read ``{{item.FIELD}}`` (the row's reference fields) and
``{{sample.output_text}}``/``{{sample.output_json.KEY}}`` (the model's answer).

``python`` and the model graders need the outside world: :func:`grade` takes them as
callbacks (``python(source, sample, item) -> float`` runs in the grader sandbox;
``model(model, messages, sampling) -> str`` asks a registered model or judge endpoint). An
error is reported with OpenAI's flags (:data:`ERROR_FLAGS`), never raised past
:func:`grade`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

try:  # a package here; top-level modules inside a reward bundle
    from .formula import FormulaError, evaluate_formula, parse_formula
    from .similarity import METRICS, UNAVAILABLE
except ImportError:  # pragma: no cover - the bundle's layout
    from formula import FormulaError, evaluate_formula, parse_formula  # type: ignore[no-redef]
    from similarity import METRICS, UNAVAILABLE  # type: ignore[no-redef]

TYPES = ("string_check", "text_similarity", "python", "score_model", "label_model", "multi")
ERROR_FLAGS = (
    "formula_parse_error",
    "invalid_variable_error",
    "model_grader_parse_error",
    "model_grader_refusal_error",
    "model_grader_server_error",
    "other_error",
    "python_grader_runtime_error",
    "python_grader_server_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
)
"""The boolean error flags of OpenAI's ``metadata.errors`` (graders run)."""
_FIELDS = {
    "string_check": ({"type", "name", "input", "reference", "operation"}, set()),
    "text_similarity": ({"type", "name", "input", "reference", "evaluation_metric"}, set()),
    "python": ({"type", "name", "source"}, {"image_tag"}),
    "score_model": ({"type", "name", "model", "input"}, {"range", "sampling_params"}),
    "label_model": ({"type", "name", "model", "input", "labels", "passing_labels"}, set()),
    "multi": ({"type", "name", "graders", "calculate_output"}, set()),
}
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
MAX_SOURCE_CHARS = 256 * 1024
"""OpenAI's limit on a python grader's source (256 KB)."""


class GraderError(ValueError):
    """A grader object that is not valid; ``param`` is its path (``grader.graders.a.input``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


class GradeFailure(Exception):
    """A grader that could not score this sample; ``flag`` is one of :data:`ERROR_FLAGS`."""

    def __init__(self, flag: str, detail: str) -> None:
        super().__init__(detail)
        self.flag, self.detail = flag, detail


def _need_str(g: Mapping[str, Any], key: str, param: str) -> str:
    v = g.get(key)
    if not isinstance(v, str) or (key != "reference" and not v.strip()):
        raise GraderError(f"{param}.{key} must be a non-empty string, not {v!r}.", f"{param}.{key}")
    return v


def _check_messages(g: Mapping[str, Any], param: str) -> None:
    msgs = g.get("input")
    if not isinstance(msgs, list) or not msgs:
        raise GraderError(f"{param}.input must be a non-empty list of messages.", f"{param}.input")
    for i, m in enumerate(msgs):
        p = f"{param}.input[{i}]"
        if not isinstance(m, dict) or m.get("role") not in (
            "user",
            "assistant",
            "system",
            "developer",
        ):
            raise GraderError(
                f"{p} must be a message with role user, assistant, system or developer.", p
            )
        _text(m.get("content"), p + ".content")


def _text(content: Any, param: str) -> str:
    """A message's text: a string, or text parts (``input_text``/``output_text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
                out.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise GraderError(
                    f"{param}: a {kind} part is not supported here; give text.", param
                )
        return "".join(out)
    raise GraderError(f"{param} must be text or a list of text parts.", param)


def check_grader(g: Any, param: str = "grader", nested: bool = False) -> None:
    """Check a grader object's shape, as OpenAI's ``graders/validate`` does.

    Raises:
        GraderError: naming the path of the first wrong field: a missing or unknown field,
            an unknown type or metric, a metric this service does not compute
            (:data:`.similarity.UNAVAILABLE`), a python source without ``grade`` that does
            not compile, a formula that does not parse or names no grader.
    """
    if not isinstance(g, dict):
        raise GraderError(f"{param} must be a grader object.", param)
    kind = g.get("type")
    if kind not in TYPES or (nested and kind == "multi"):
        allowed = TYPES[:-1] if nested else TYPES
        raise GraderError(
            f"{param}.type {kind!r} is not one of {', '.join(allowed)}.", f"{param}.type"
        )
    need, extra = _FIELDS[kind]
    for k in sorted(need - set(g)):
        raise GraderError(f"{param}.{k} is required for a {kind} grader.", f"{param}.{k}")
    for k in sorted(set(g) - need - extra):
        raise GraderError(f"{param}.{k} is not a field of a {kind} grader.", f"{param}.{k}")
    _need_str(g, "name", param)
    if kind in ("string_check", "text_similarity"):
        _need_str(g, "input", param), _need_str(g, "reference", param)
    if kind == "string_check" and g["operation"] not in ("eq", "ne", "like", "ilike"):
        raise GraderError(f"{param}.operation must be eq, ne, like or ilike.", f"{param}.operation")
    if kind == "text_similarity":
        m = g["evaluation_metric"]
        if m in UNAVAILABLE:
            raise GraderError(
                f"{param}.evaluation_metric {m}: {UNAVAILABLE[m]}.", f"{param}.evaluation_metric"
            )
        if m not in METRICS:
            raise GraderError(
                f"{param}.evaluation_metric {m!r} is not one of {', '.join(METRICS)}.",
                f"{param}.evaluation_metric",
            )
    if kind == "python":
        _check_python(g, param)
    if kind in ("score_model", "label_model"):
        _need_str(g, "model", param)
        _check_messages(g, param)
    if kind == "score_model" and g.get("range") is not None:
        r = g["range"]
        if not (
            isinstance(r, list)
            and len(r) == 2
            and all(isinstance(x, int | float) for x in r)
            and r[0] < r[1]
        ):
            raise GraderError(
                f"{param}.range must be [low, high] with low < high.", f"{param}.range"
            )
    if kind == "label_model":
        labels = g["labels"]
        if (
            not isinstance(labels, list)
            or not labels
            or not all(isinstance(x, str) and x for x in labels)
        ):
            raise GraderError(
                f"{param}.labels must be a non-empty list of strings.", f"{param}.labels"
            )
        bad = [x for x in g["passing_labels"] or [None] if x not in labels]
        if bad:
            raise GraderError(
                f"{param}.passing_labels {bad[0]!r} is not one of the labels.",
                f"{param}.passing_labels",
            )
    if kind == "multi":
        subs = sub_graders(g, param)
        for name, sub in subs.items():
            check_grader(sub, f"{param}.graders.{name}", nested=True)
        try:
            parse_formula(g["calculate_output"], frozenset(subs))
        except FormulaError as exc:
            raise GraderError(str(exc), f"{param}.calculate_output") from None


def _check_python(g: Mapping[str, Any], param: str) -> None:
    src = _need_str(g, "source", param)
    if len(src) > MAX_SOURCE_CHARS:
        raise GraderError(
            f"{param}.source is over {MAX_SOURCE_CHARS} characters.", f"{param}.source"
        )
    if g.get("image_tag") not in (None, "2025-05-08"):
        raise GraderError(
            f"{param}.image_tag {g['image_tag']!r} is not 2025-05-08.", f"{param}.image_tag"
        )
    import ast

    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise GraderError(
            f"{param}.source does not compile: {exc.msg} (line {exc.lineno}).", f"{param}.source"
        ) from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "grade" for n in tree.body):
        raise GraderError(
            f"{param}.source defines no function grade(sample, item).", f"{param}.source"
        )


def sub_graders(g: Mapping[str, Any], param: str = "grader") -> dict[str, dict[str, Any]]:
    """A multi grader's sub-graders by name: a ``{name: grader}`` object (OpenAI's docs) or
    one grader (the SDK's type), named by its ``name``."""
    subs = g.get("graders")
    if isinstance(subs, dict) and "type" in subs:
        subs = {str(subs.get("name")): subs}
    if not isinstance(subs, dict) or not subs:
        raise GraderError(f"{param}.graders must map names to graders.", f"{param}.graders")
    return subs


def render(template: str, sample: Mapping[str, Any], item: Mapping[str, Any]) -> str:
    """``template`` with ``{{item.X}}`` and ``{{sample.X}}`` replaced (non-strings as JSON).

    Raises:
        GradeFailure: ``invalid_variable_error`` for a path the sample or item lacks.
    """

    def one(m: re.Match[str]) -> str:
        root, *path = m.group(1).split(".")
        value: Any = {"item": item, "sample": sample}.get(root)
        if root not in ("item", "sample"):
            raise GradeFailure(
                "invalid_variable_error", f"{{{{{m.group(1)}}}}} is not item.* or sample.*"
            )
        for p in path:
            if isinstance(value, dict) and p in value:
                value = value[p]
            elif isinstance(value, list) and p.isdigit() and int(p) < len(value):
                value = value[int(p)]
            else:
                raise GradeFailure(
                    "invalid_variable_error", f"{{{{{m.group(1)}}}}}: no {p!r} there"
                )
        return value if isinstance(value, str) else json.dumps(value)

    return _TEMPLATE.sub(one, template)


def make_sample(output_text: str) -> dict[str, Any]:
    """OpenAI's ``sample`` namespace for a model answer: ``output_text`` and, when the text
    is JSON, ``output_json``."""
    try:
        as_json = json.loads(output_text)
    except ValueError:
        as_json = None
    return {"output_text": output_text, "output_json": as_json, "output_tools": [], "choices": []}


PythonRunner = Callable[[str, dict[str, Any], dict[str, Any]], float]
ModelAsker = Callable[[str, list[dict[str, str]], dict[str, Any]], str]


def _score_one(
    g: Mapping[str, Any],
    sample: dict[str, Any],
    item: dict[str, Any],
    python: PythonRunner | None,
    model: ModelAsker | None,
    scores: dict[str, float],
) -> float:
    kind = g["type"]
    if kind == "string_check":
        a, b = render(g["input"], sample, item), render(g["reference"], sample, item)
        op = g["operation"]
        hit = {"eq": a == b, "ne": a != b, "like": b in a, "ilike": b.lower() in a.lower()}[op]
        return float(hit)
    if kind == "text_similarity":
        return METRICS[g["evaluation_metric"]](
            render(g["input"], sample, item), render(g["reference"], sample, item)
        )
    if kind == "python":
        if python is None:
            raise GradeFailure("python_grader_server_error", "no grader sandbox here")
        return float(python(g["source"], sample, item))
    if kind in ("score_model", "label_model"):
        if model is None:
            raise GradeFailure("model_grader_server_error", "no model grader here")
        msgs = [
            {
                "role": "system" if m["role"] == "developer" else m["role"],
                "content": render(_text(m["content"], "input"), sample, item),
            }
            for m in g["input"]
        ]
        reply = model(g["model"], msgs, dict(g.get("sampling_params") or {}))
        return _model_score(g, reply)
    subs = sub_graders(g)
    for name, sub in subs.items():
        scores[name] = _score_one(sub, sample, item, python, model, scores)
    try:
        return evaluate_formula(g["calculate_output"], {n: scores[n] for n in subs})
    except FormulaError as exc:
        flag = {"parse": "formula_parse_error", "variable": "invalid_variable_error"}.get(
            exc.kind, "other_error"
        )
        raise GradeFailure(flag, str(exc)) from None


def _model_score(g: Mapping[str, Any], reply: str) -> float:
    """A model grader's score from its reply: ``{"result": x}`` or the first number
    (score_model, clamped to ``range``); 1 when the reply is a passing label (label_model)."""
    text = reply.strip()
    if g["type"] == "label_model":
        labels = sorted(g["labels"], key=len, reverse=True)
        hit = next((lb for lb in labels if text == lb), None) or next(
            (lb for lb in labels if lb in text), None
        )
        if hit is None:
            raise GradeFailure(
                "model_grader_parse_error", f"the reply {text[:200]!r} names none of the labels"
            )
        return float(hit in g["passing_labels"])
    try:
        value = json.loads(text)
        value = value.get("result") if isinstance(value, dict) else value
        number = float(value)
    except (ValueError, TypeError):
        m = _NUMBER.search(text)
        if m is None:
            raise GradeFailure(
                "model_grader_parse_error", f"the reply {text[:200]!r} holds no score"
            ) from None
        number = float(m.group())
    lo, hi = g.get("range") or [0.0, 1.0]
    return min(max(number, lo), hi)


def grade(
    g: Mapping[str, Any],
    output_text: str,
    item: Mapping[str, Any] | None,
    python: PythonRunner | None = None,
    model: ModelAsker | None = None,
) -> dict[str, Any]:
    """Score one answer as OpenAI's ``graders/run`` answers (``GraderRunResponse``):
    ``{"reward", "metadata": {"name", "type", "errors", "execution_time", "scores",
    "token_usage", "sampled_model_name"}, "sub_rewards", "model_grader_token_usage_per_model"}``.
    A failure scores 0 with its flag set and its detail in ``*_details`` where OpenAI has one."""
    started = time.monotonic()
    errors: dict[str, Any] = {f: False for f in ERROR_FLAGS}
    errors.update(
        python_grader_runtime_error_details=None,
        python_grader_server_error_type=None,
        model_grader_server_error_details=None,
    )
    scores: dict[str, float] = {}
    try:
        reward = _score_one(g, make_sample(output_text), dict(item or {}), python, model, scores)
    except GradeFailure as exc:
        reward = 0.0
        errors[exc.flag] = True
        if exc.flag == "python_grader_runtime_error":
            errors["python_grader_runtime_error_details"] = exc.detail
        elif exc.flag == "python_grader_server_error":
            errors["python_grader_server_error_type"] = exc.detail
        elif exc.flag == "model_grader_server_error":
            errors["model_grader_server_error_details"] = exc.detail
    return {
        "reward": reward,
        "metadata": {
            "name": g.get("name"),
            "type": g.get("type"),
            "errors": errors,
            "execution_time": round(time.monotonic() - started, 6),
            "scores": dict(scores),
            "token_usage": None,
            "sampled_model_name": None,
        },
        "sub_rewards": dict(scores),
        "model_grader_token_usage_per_model": {},
    }
