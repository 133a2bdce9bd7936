"""Reference grammar (issue 3 item 1): every case of refs.jsonl, and the naming rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from akka_optimize.errors import InvalidRequest
from akka_optimize.evals.graders.spec import parse_grader
from akka_optimize.refs import (
    GRADER_PATTERN,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    REF_NAME_PATTERN,
    REF_PATTERN,
    parse_ref,
    repository_ref,
    validate_name,
)

CASES = [
    json.loads(x)
    for x in (Path(__file__).resolve().parents[1] / "cases" / "refs.jsonl").read_text().splitlines()
    if x.strip()
]


@pytest.mark.parametrize("case", CASES, ids=[c["ref"] or "<empty>" for c in CASES])
def test_every_reference_case_parses_as_expected(case):
    exp = case["expect"]
    if exp.get("error"):
        with pytest.raises(InvalidRequest) as info:
            parse_ref(case["ref"], case["project"])
        assert info.value.field == "ref"
        assert case["ref"] in info.value.message or not case["ref"]
        return
    r = parse_ref(case["ref"], case["project"])
    assert (r.namespace, r.name) == (exp["namespace"], exp["name"])
    if "selector" in exp:
        assert r.selector == exp["selector"]
        assert (r.version, r.alias, r.digest) == (None, None, None)
    if "version" in exp:
        assert f"v{r.version}" == exp["version"]
    if "alias" in exp:
        assert r.alias == exp["alias"] and r.version is None
    if "digest" in exp:
        assert r.digest == exp["digest"]


def test_pinned_form_round_trips_through_str():
    pinned = "triage/train:v3@sha256:" + "ab" * 32
    r = parse_ref(pinned)
    assert (r.version, r.digest) == (3, "sha256:" + "ab" * 32)
    assert str(r) == pinned
    assert str(parse_ref("Triage/Train:Candidate")) == "triage/train:candidate"
    assert str(parse_ref("triage/train:latest")) == "triage/train"


def test_bare_name_without_project_is_refused_with_a_sentence():
    with pytest.raises(InvalidRequest, match="names no namespace"):
        parse_ref("train")


def test_field_is_the_one_given():
    with pytest.raises(InvalidRequest) as info:
        parse_ref("a/b/c", field="dataset")
    assert info.value.field == "dataset"


def test_alias_and_digest_cannot_be_combined_and_v0_is_refused():
    with pytest.raises(InvalidRequest, match="cannot be combined"):
        parse_ref("t/x:champion@sha256:" + "0" * 64)
    with pytest.raises(InvalidRequest, match="start at v1"):
        parse_ref("t/x:v0")


@pytest.mark.parametrize(
    "name,ok",
    [
        ("triage", True),
        ("qwen3-0.6b", True),
        ("a_b.c-d", True),
        ("Triage", True),
        ("a..b", False),
        (".hidden", False),
        ("-flag", False),
        ("tr ain", False),
        ("é", False),
        ("", False),
        ("x" * MAX_NAME_LENGTH, True),
        ("x" * (MAX_NAME_LENGTH + 1), False),
    ],
)
def test_naming_rule(name, ok):
    if ok:
        assert validate_name(name, "project") == name.lower()
    else:
        with pytest.raises(InvalidRequest) as info:
            validate_name(name, "project")
        assert info.value.field == "project"
        assert "project" in info.value.message


def test_hub_repository_names_the_base_model_in_lower_case():
    assert repository_ref("meta-llama/Llama-3.2-1B-Instruct").repo == (
        "meta-llama/llama-3.2-1b-instruct"
    )
    with pytest.raises(InvalidRequest):
        repository_ref("Qwen/Qwen3-0.6B:v2")


_NAMEISH = "aZ09._-/:@\u212a\u00e9 v"  # the name alphabet, its separators, and look-alikes


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(st.one_of(st.text(_NAMEISH, max_size=12), st.from_regex(NAME_PATTERN, fullmatch=True)))
@example("a..b")
@example("a.b.")
@example(".a")
@example("Ab-_9")
@example("\u212aelvin")
@example("a" * (MAX_NAME_LENGTH + 1))
def test_the_documented_name_pattern_is_the_naming_rule(name):
    """The OpenAPI document's name pattern (issue 48 item 9) accepts a name exactly when
    validate_name does, up to the length bound the document gives separately."""
    try:
        validate_name(name, "name")
        accepted = True
    except InvalidRequest:
        accepted = False
    documented = re.fullmatch(NAME_PATTERN, name) is not None and len(name) <= MAX_NAME_LENGTH
    assert documented == accepted, name


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.from_regex(REF_NAME_PATTERN, fullmatch=True))
def test_every_documented_reference_name_parses(name):
    """A ``{name}`` the document calls valid on a reference route parses (it may be
    narrower than the grammar, never wider)."""
    if len(name) <= MAX_NAME_LENGTH:
        assert parse_ref(f"ns/{name}").name == name.partition(":")[0].partition("@")[0].lower()


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.from_regex(REF_PATTERN, fullmatch=True), st.from_regex(GRADER_PATTERN, fullmatch=True))
def test_every_documented_reference_and_grader_parses(ref, grader):
    """Issue 48 item 9: a request field the document gives :data:`REF_PATTERN` (a model,
    dataset or source) or the grader pattern takes every value it calls valid (in a project,
    for a reference without a namespace), when each name is within the length bound."""
    names = re.split(r"[/:@#]", ref) + re.split(r"[/:@#]", grader)
    if max(map(len, names)) <= MAX_NAME_LENGTH:
        assert (
            parse_ref(ref, "p").name
            == ref.split("/")[-1].partition(":")[0].partition("@")[0].lower()
        )
        spec = parse_grader(grader)
        assert spec.kind == grader.partition(":")[0]
