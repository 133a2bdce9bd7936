"""The grader grammar and the submit-time check of a bundle's entry point.

``bundle:REFERENCE#MODULE[:FUNCTION]`` and ``model:REFERENCE`` (seed "Grader
specification"); the check reads the bundle's files with :mod:`ast` and never runs them.
"""

from __future__ import annotations

import pytest

from akka_optimize.errors import InvalidRequest
from akka_optimize.evals.graders.spec import GraderSpec, check_bundle_entry, parse_grader

DIGEST = "sha256:" + "ab" * 32
SCORE = b"def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


def refusal(text: str, **kw) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_grader(text, **kw)
    return info.value


# --- parse_grader -----------------------------------------------------------------------


def test_bundle_with_module_and_function() -> None:
    spec = parse_grader("bundle:gsm8k/scoring#reward:compute_score")
    assert spec == GraderSpec(
        kind="bundle", ref="gsm8k/scoring", module="reward", function="compute_score"
    )
    assert spec.text == "bundle:gsm8k/scoring#reward:compute_score"


def test_bundle_function_defaults_to_compute_score_and_module_may_be_dotted() -> None:
    spec = parse_grader("bundle:gsm8k/scoring:v2#pkg.reward")
    assert (spec.ref, spec.module, spec.function) == (
        "gsm8k/scoring:v2",
        "pkg.reward",
        "compute_score",
    )
    assert spec.text == "bundle:gsm8k/scoring:v2#pkg.reward:compute_score"


def test_bundle_reference_may_carry_a_digest_and_be_bare() -> None:
    spec = parse_grader(f"bundle:scoring@{DIGEST}#reward:score_gsm8k")
    assert spec.ref == f"scoring@{DIGEST}"
    assert spec.function == "score_gsm8k"
    assert parse_grader("bundle:scoring:champion#reward").ref == "scoring:champion"


def test_model_judge() -> None:
    spec = parse_grader("model:judge")
    assert spec == GraderSpec(kind="model", ref="judge", module=None, function=None)
    assert spec.text == "model:judge"
    assert parse_grader("model:team/judge:v3").ref == "team/judge:v3"


def test_the_07_spelling_is_refused_with_the_new_one() -> None:
    exc = refusal("bundle:gsm8k/reward:compute_score")
    assert exc.field == "grader"
    assert "0.7" in exc.message
    assert "bundle:gsm8k#reward:compute_score" in exc.message


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("bundle:gsm8k/scoring#re-ward", "re-ward"),
        ("bundle:gsm8k/scoring#reward:2score", "2score"),
        ("bundle:gsm8k/scoring#pkg..reward", "pkg..reward"),
        ("bundle:gsm8k/scoring#class", "class"),
        ("bundle:gsm8k/scoring#reward:compute score", "compute score"),
        ("bundle:gsm8k/scoring#reward:a:b", "a:b"),
    ],
)
def test_names_that_are_not_python_identifiers_are_refused(text: str, bad: str) -> None:
    exc = refusal(text)
    assert repr(bad) in exc.message
    assert "identifier" in exc.message


@pytest.mark.parametrize("text", ["", "   ", "reward.py", "builtins:math", "http://x/y"])
def test_an_unknown_prefix_lists_the_two_forms(text: str) -> None:
    exc = refusal(text, field="config.rlHyperparams.reward")
    assert exc.field == "config.rlHyperparams.reward"
    assert "bundle:REFERENCE#MODULE[:FUNCTION]" in exc.message
    assert "model:REFERENCE" in exc.message


@pytest.mark.parametrize(
    "text", ["bundle:gsm8k/scoring", "bundle:gsm8k/scoring:v2", "bundle:gsm8k/scoring#"]
)
def test_a_missing_module_is_refused(text: str) -> None:
    exc = refusal(text)
    assert "module" in exc.message
    assert "#reward" in exc.message  # shows where the module goes


@pytest.mark.parametrize(
    "text", ["bundle:a/b/c#reward", "bundle:#reward", "model:", "model:Bad Name"]
)
def test_a_bad_reference_is_refused(text: str) -> None:
    exc = refusal(text)
    assert exc.field == "grader"
    assert "not valid" in exc.message or "empty" in exc.message


# --- check_bundle_entry -----------------------------------------------------------------


def check(files: dict[str, bytes], text: str) -> None:
    check_bundle_entry(files, parse_grader(text), "gsm8k/scoring:v1")


def entry_refusal(files: dict[str, bytes], text: str) -> str:
    with pytest.raises(InvalidRequest) as info:
        check(files, text)
    assert info.value.field == "grader"
    return info.value.message


def test_a_plain_module_defining_the_function_passes() -> None:
    check({"reward.py": SCORE, "data/answers.json": b"{}"}, "bundle:gsm8k/scoring#reward")


def test_dotted_modules_and_packages_resolve() -> None:
    check({"pkg/__init__.py": b"", "pkg/reward.py": SCORE}, "bundle:s/b#pkg.reward")
    check({"pkg/reward.py": SCORE}, "bundle:s/b#pkg.reward")  # a namespace package
    check({"reward/__init__.py": SCORE}, "bundle:s/b#reward")
    check({"a/b/c.py": SCORE.replace(b"compute_score", b"grade")}, "bundle:s/b#a.b.c:grade")


def test_assignments_imports_and_guarded_definitions_count() -> None:
    check({"reward.py": b"def _impl(*a): return 0\ncompute_score = _impl\n"}, "bundle:s/b#reward")
    check({"reward/__init__.py": b"from .impl import compute_score\n"}, "bundle:s/b#reward")
    check({"reward.py": b"from x import score as compute_score\n"}, "bundle:s/b#reward")
    fallback = b"".join(b"    " + line + b"\n" for line in SCORE.splitlines())
    guarded = b"try:\n    from fast import compute_score\nexcept ImportError:\n" + fallback
    check({"reward.py": guarded}, "bundle:s/b#reward")


def test_a_missing_module_is_named_with_what_the_bundle_holds() -> None:
    message = entry_refusal({"x.py": SCORE, "y.py": SCORE}, "bundle:s/b#reward")
    assert "gsm8k/scoring:v1 has no module reward" in message
    assert "reward.py" in message and "reward/__init__.py" in message
    assert "x.py, y.py" in message


def test_a_missing_package_part_is_named() -> None:
    message = entry_refusal({"reward.py": SCORE}, "bundle:s/b#pkg.reward")
    assert "no package pkg" in message
    assert "reward.py" in message  # what it holds
    message = entry_refusal({"pkg/other.py": SCORE}, "bundle:s/b#pkg.reward")
    assert "no module pkg.reward" in message and "pkg/other.py" in message


def test_the_listing_of_a_large_bundle_is_cut() -> None:
    files = {f"m{i:02d}.py": SCORE for i in range(30)}
    message = entry_refusal(files, "bundle:s/b#reward")
    assert "m00.py" in message and "m29.py" not in message
    assert "20 more" in message


def test_a_missing_function_is_named_with_what_the_module_defines() -> None:
    source = b"def score(a, b, c, d=None):\n    return 0\n\ndef helper():\n    pass\n"
    message = entry_refusal({"reward.py": source}, "bundle:s/b#reward")
    assert "compute_score" in message and "reward.py" in message
    assert "score" in message and "helper" in message
    # a nested definition is not at the top level
    nested = b"class K:\n    def compute_score(self):\n        return 1\n"
    assert "compute_score" in entry_refusal({"reward.py": nested}, "bundle:s/b#reward")


def test_an_async_function_is_refused() -> None:
    source = b"async def compute_score(a, b, c, d=None):\n    return 1\n"
    message = entry_refusal({"reward.py": source}, "bundle:s/b#reward")
    assert "async def" in message and "line 1" in message


def test_a_module_that_does_not_parse_is_named_with_its_line() -> None:
    source = b"import math\n\ndef compute_score(a, b:\n    return 1\n"
    message = entry_refusal({"reward.py": source}, "bundle:s/b#reward")
    assert "reward.py" in message and "line 3" in message
    # a parent package's __init__ runs on import too
    message = entry_refusal(
        {"pkg/__init__.py": b"x = (\n", "pkg/reward.py": SCORE}, "bundle:s/b#pkg.reward"
    )
    assert "pkg/__init__.py" in message and "line 1" in message


def test_a_model_grader_has_no_entry_to_check() -> None:
    with pytest.raises(InvalidRequest):
        check_bundle_entry({}, parse_grader("model:judge"), "team/judge:v1")
