"""OpenAI's graders computed here (issue 51 item 3), without a service: each metric on
texts whose value is known by hand, the multi grader's formula through ``ast`` (never
eval), the template variables, and each refusal naming its field."""

from __future__ import annotations

import pytest

from akka_optimize.core.openai_ft.formula import FormulaError, evaluate_formula
from akka_optimize.core.openai_ft.grading import GraderError, check_grader, grade
from akka_optimize.core.openai_ft.similarity import METRICS, bleu, rouge_l, rouge_n

ITEM = {"answer": "Paris", "city": {"name": "Paris"}}


def _sc(op: str, ref: str = "{{item.answer}}") -> dict:
    return {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
            "reference": ref, "operation": op}  # fmt: skip


@pytest.mark.parametrize(
    ("op", "answer", "want"),
    [("eq", "Paris", 1.0), ("eq", "paris", 0.0), ("ne", "Rome", 1.0), ("like", "It is Paris.", 1.0),
     ("like", "it is paris", 0.0), ("ilike", "it is PARIS", 1.0)],
)  # fmt: skip
def test_string_check_operations(op: str, answer: str, want: float) -> None:
    assert grade(_sc(op), answer, ITEM)["reward"] == want


def test_nested_item_fields_and_output_json_are_templates() -> None:
    g = _sc("eq", "{{item.city.name}}") | {"input": "{{sample.output_json.city}}"}
    assert grade(g, '{"city": "Paris"}', ITEM)["reward"] == 1.0
    out = grade(_sc("eq", "{{item.missing}}"), "Paris", ITEM)
    assert out["reward"] == 0.0 and out["metadata"]["errors"]["invalid_variable_error"] is True


def test_similarity_metrics_on_known_texts() -> None:
    assert METRICS["fuzzy_match"]("abcd", "abcd") == 1.0
    assert METRICS["fuzzy_match"]("abcd", "abce") == pytest.approx(0.75)  # 2*3/8
    assert bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert bleu("dog", "the cat sat on the mat") == 0.0
    # 2 of 3 unigrams match on each side: F1 = 2/3
    assert rouge_n("the cat ran", "the cat sat", 1) == pytest.approx(2 / 3)
    assert rouge_n("the cat ran", "the cat sat", 2) == pytest.approx(1 / 2)
    assert rouge_l("a b c d", "a x c d") == pytest.approx(3 / 4)  # LCS a c d
    assert METRICS["gleu"]("a b", "a b") == 1.0


def test_cosine_and_meteor_are_refused_naming_the_metric() -> None:
    for metric, words in (("cosine", "embedding model"), ("meteor", "WordNet")):
        g = {"type": "text_similarity", "name": "t", "input": "x", "reference": "y",
             "evaluation_metric": metric}  # fmt: skip
        with pytest.raises(GraderError) as e:
            check_grader(g)
        assert e.value.param == "grader.evaluation_metric" and words in e.value.message


def test_multi_formula_is_arithmetic_over_the_sub_graders() -> None:
    g = {"type": "multi", "name": "m", "calculate_output": "0.5 * a + max(b, 0.25) ^ 2",
         "graders": {"a": _sc("eq"), "b": _sc("ne")}}  # fmt: skip
    check_grader(g)
    out = grade(g, "Paris", ITEM)  # a = 1, b = 0
    assert out["reward"] == pytest.approx(0.5 + 0.0625)
    assert out["sub_rewards"] == {"a": 1.0, "b": 0.0}


@pytest.mark.parametrize(
    ("formula", "kind"),
    [("a +", "parse"), ("__import__('os')", "parse"), ("a.real", "parse"), ("c + 1", "variable"),
     ("'x'", "parse"), ("a if b else 1", "parse"), ("open(a)", "parse"), ("a[0]", "parse")],
)  # fmt: skip
def test_a_formula_outside_the_grammar_is_refused_without_running(formula: str, kind: str) -> None:
    with pytest.raises(FormulaError) as e:
        evaluate_formula(formula, {"a": 1.0, "b": 0.0})
    assert e.value.kind == kind


def test_a_formula_that_divides_by_zero_is_an_error_flag_not_a_crash() -> None:
    g = {"type": "multi", "name": "m", "calculate_output": "a / b",
         "graders": {"a": _sc("eq"), "b": _sc("ne")}}  # fmt: skip
    out = grade(g, "Paris", ITEM)
    assert out["reward"] == 0.0 and out["metadata"]["errors"]["other_error"] is True


@pytest.mark.parametrize(
    ("grader", "param"),
    [({"type": "nope", "name": "x"}, "grader.type"),
     ({"type": "string_check", "name": "x", "input": "a", "reference": "b"}, "grader.operation"),
     ({**_sc("eq"), "extra": 1}, "grader.extra"),
     ({"type": "python", "name": "p", "source": "def f(): pass"}, "grader.source"),
     ({"type": "python", "name": "p", "source": "def grade(s, i):\n  return ("}, "grader.source"),
     ({"type": "label_model", "name": "l", "model": "m", "input": [{"role": "user", "content": "x"}],
       "labels": ["a"], "passing_labels": ["b"]}, "grader.passing_labels"),
     ({"type": "multi", "name": "m", "calculate_output": "a + zz", "graders": {"a": _sc("eq")}},
      "grader.calculate_output"),
     ({"type": "multi", "name": "m", "calculate_output": "a", "graders": {"a": {"type": "multi"}}},
      "grader.graders.a.type")],
)  # fmt: skip
def test_a_bad_grader_is_refused_naming_its_field(grader: dict, param: str) -> None:
    with pytest.raises(GraderError) as e:
        check_grader(grader)
    assert e.value.param == param, e.value.message


def test_model_graders_parse_their_reply() -> None:
    score = {"type": "score_model", "name": "s", "model": "demo/judge",
             "input": [{"role": "user", "content": "Rate {{sample.output_text}}"}], "range": [0, 10]}  # fmt: skip
    asked: list = []

    def model(name, messages, sampling):
        asked.append((name, messages))
        return '{"result": 7}'

    assert grade(score, "hi", {}, model=model)["reward"] == 7.0
    assert asked == [("demo/judge", [{"role": "user", "content": "Rate hi"}])]
    label = {"type": "label_model", "name": "l", "model": "demo/judge", "labels": ["good", "bad"],
             "passing_labels": ["good"], "input": [{"role": "user", "content": "x"}]}  # fmt: skip
    assert grade(label, "", {}, model=lambda *_: "good")["reward"] == 1.0
    out = grade(label, "", {}, model=lambda *_: "unsure")
    assert out["metadata"]["errors"]["model_grader_parse_error"] is True
