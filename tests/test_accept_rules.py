"""perf-accept.yml's rules, one at a time: each key an entry must hold and the exact message a maintainer reads
when it is wrong; the slowdowns an entry is weighed against; and the note a refused entry leaves on the case."""

import pytest
import yaml

from mlagate.decide import acceptance
from mlagate.decide.verdict import CaseVerdict, Verdict
from mlagate.decide.vocabulary import Kind, Note, Outcome, Status

WHERE = "perf-accept.yml of base"
GOOD = {"commit": "abcdef1", "pr": 7, "cases": ["tilelang-seesaw h=16 b=* s=4096 float16"], "max_change": 0.12,
        "why": "four KV splits", "who": "a-maintainer"}


def parsed(**changes):
    item = {k: v for k, v in {**GOOD, **changes}.items() if v is not ...}
    return acceptance.parse(yaml.safe_dump({"accepted": [item]}), WHERE)


def refusal(**changes) -> str:
    with pytest.raises(acceptance.AcceptanceError) as e:
        parsed(**changes)
    return str(e.value)


def test_a_well_formed_entry_is_read_with_its_text_stripped():
    (entry,) = parsed(cases=[" a ", "b*"], why=" why \n", who=" m ", max_change=0.5)
    assert entry == acceptance.Entry("abcdef1", 7, ("a", "b*"), 0.5, "why", "m")


def test_an_entry_that_is_not_a_mapping_names_the_keys_it_needs():
    with pytest.raises(acceptance.AcceptanceError) as e:
        acceptance.parse("accepted:\n  - abcdef1\n", WHERE)
    assert str(e.value) == f"{WHERE}: accepted[0]: an entry is a mapping of cases, commit, max_change, pr, who, why"


@pytest.mark.parametrize("changes, message", [
    ({"pr": ..., "who": ...}, "missing pr, who"),
    ({"by": "x", "at": "y"}, "unknown key at, by"),
    ({"why": ..., "by": "x"}, "missing why; unknown key by"),
])
def test_missing_and_unknown_keys_are_each_listed_once(changes, message):
    assert refusal(**changes) == f"{WHERE}: accepted[0]: {message}"


@pytest.mark.parametrize("pr", [0, -3, True, "7"])
def test_a_pull_request_number_is_a_positive_integer(pr):
    assert refusal(pr=pr) == f"{WHERE}: accepted[0].pr: {pr!r} is not a pull request number"


def test_pull_request_one_is_a_pull_request():
    assert parsed(pr=1)[0].pr == 1


@pytest.mark.parametrize("cases", [[], [" "], "abc", ["a", 3]])
def test_cases_are_a_non_empty_list_of_labels(cases):
    assert refusal(cases=cases) == (f"{WHERE}: accepted[0].cases: a non-empty list of case labels "
                                    "(as gate.md prints them)")


@pytest.mark.parametrize("limit", [0, 1, 0.0, 1.0, -0.1, 1.5, True, "0.1"])
def test_max_change_lies_strictly_between_0_and_1(limit):
    assert refusal(max_change=limit) == (f"{WHERE}: accepted[0].max_change: {limit!r} must be a slowdown between 0 "
                                         "and 1 (0.12 accepts up to +12%)")


@pytest.mark.parametrize("limit", [0.001, 0.999])
def test_max_change_just_inside_its_bounds_is_read(limit):
    assert parsed(max_change=limit)[0].max_change == limit


@pytest.mark.parametrize("key, value, says", [
    ("why", " ", "why the change is accepted"),
    ("why", 5, "why the change is accepted"),
    ("who", "", "who accepted it (a GitHub login)"),
    ("who", ["m"], "who accepted it (a GitHub login)"),
])
def test_why_and_who_must_say_something(key, value, says):
    assert refusal(**{key: value}) == f"{WHERE}: accepted[0].{key}: must say {says}"


def case(**fields):
    return CaseVerdict(("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", "dense"), Status.REGRESSION, **fields)


def test_the_slowdowns_are_latency_the_re_measure_and_the_vendor_ratios_fall():
    cv = case(change=0.05, confirmation={"change": 0.07}, ratio_dropped=True, vendor_ratio=0.6, base_vendor_ratio=0.8)
    assert acceptance.slowdowns(cv) == [0.05, 0.07, pytest.approx(0.25)]


def test_a_case_without_a_latency_change_has_only_the_slowdowns_it_measured():
    assert acceptance.slowdowns(case()) == []
    assert acceptance.slowdowns(case(confirmation={"change": 0.07})) == [0.07]


def test_a_vendor_ratio_counts_only_when_it_dropped():
    assert acceptance.slowdowns(case(change=0.05, vendor_ratio=0.6, base_vendor_ratio=0.8)) == [0.05]
    assert acceptance.slowdowns(case(change=0.05, ratio_dropped=True, vendor_ratio=0.6)) == [0.05]


def test_an_entry_only_the_pull_request_holds_leaves_a_not_accepted_reason_and_the_regression():
    cv = case(change=0.05)
    v = Verdict(Outcome.REGRESSION, [cv])
    (entry,) = parsed(commit="abcdef1", cases=[cv.label])
    acceptance.apply(v, [], [entry], {"abcdef1" + "0" * 33})
    assert (v.outcome, cv.status) == (Outcome.REGRESSION, Status.REGRESSION)
    assert cv.reasons == [Note(Kind.NOT_ACCEPTED, "perf-accept.yml entry of PR #7 (a-maintainer) is only in this "
                               "change's perf-accept.yml, not in the base's: a pull request cannot accept its own "
                               "slowdown; a maintainer lands the entry on main (docs/gate.md, \"Accepting a change\")")]


def test_history_without_a_mark_for_the_case_is_kept_whole():
    history = [type("R", (), {"commit": c})() for c in ("a", "b")]
    assert acceptance.since_mark(history, "x", ()) == history


HEAD = ("abcdef1" + "0" * 33,)


def other_case(**fields):
    return CaseVerdict(("tilelang-seesaw", 128, 4096, "float16", 16, 1, "float16", "dense"), Status.REGRESSION,
                       **fields)


def test_a_base_entry_within_its_max_change_accepts_the_regression_and_the_gate_passes():
    cv, untouched = case(change=0.05, confirmation={"change": 0.06}), other_case()
    untouched.status = Status.PASS
    v = Verdict(Outcome.REGRESSION, [cv, untouched])
    (entry,) = parsed(cases=[cv.label])
    (pr_entry,) = parsed(cases=[cv.label], pr=9, who="a-contributor")  # the base's entry is read first
    acceptance.apply(v, [entry], [pr_entry], HEAD)
    assert (v.outcome, cv.status, untouched.status) == (Outcome.PASS, Status.ACCEPTED, Status.PASS)
    assert cv.acceptance == entry.as_dict("base") and cv.acceptance["source"] == "base"
    assert cv.warnings == [Note(Kind.ACCEPTED, "accepted: +6.0% within +12.0% by perf-accept.yml entry of PR #7 "
                                               "(a-maintainer): four KV splits")]
    assert cv.reasons == [] and untouched.acceptance is None and untouched.warnings == []


def test_an_entry_accepts_only_up_to_its_max_change_and_another_regression_still_fails():
    cv, unnamed = case(change=0.05, confirmation={"change": 0.07}), other_case(change=0.05)
    v = Verdict(Outcome.REGRESSION, [cv, unnamed])
    (entry,) = parsed(cases=[cv.label], max_change=0.06)
    acceptance.apply(v, [entry], [], HEAD)
    assert (v.outcome, cv.status, unnamed.status) == (Outcome.REGRESSION, Status.REGRESSION, Status.REGRESSION)
    assert cv.reasons == [Note(Kind.NOT_ACCEPTED, "perf-accept.yml entry of PR #7 (a-maintainer) accepts at most "
                                                  "+6.0%; measured +7.0%: the change is larger than what was "
                                                  "accepted")]
    assert cv.acceptance["max_change"] == 0.06 and unnamed.acceptance is None and unnamed.reasons == []


def test_an_entry_never_accepts_a_vendor_ratio_under_the_floor():
    cv = case(change=0.01, below_floor=True)
    v = Verdict(Outcome.REGRESSION, [cv])
    (entry,) = parsed(cases=[cv.label])
    acceptance.apply(v, [entry], [], HEAD)
    assert (v.outcome, cv.status) == (Outcome.REGRESSION, Status.REGRESSION)
    assert cv.reasons == [Note(Kind.NOT_ACCEPTED, "perf-accept.yml entry of PR #7 (a-maintainer) cannot accept a "
                                                  "vendor ratio under the floor: the floor is perf.yml's "
                                                  "(gate.vendor_ratio)")]


def test_an_entry_for_another_commit_or_case_accepts_nothing():
    cv = case(change=0.05)
    v = Verdict(Outcome.REGRESSION, [cv])
    acceptance.apply(v, [parsed(commit="1234567")[0], parsed(cases=["other*"])[0]], [], HEAD)
    assert (v.outcome, cv.status, cv.acceptance, cv.reasons, cv.warnings) == (
        Outcome.REGRESSION, Status.REGRESSION, None, [], [])


def test_accepting_every_regression_leaves_an_unsure_case_failing_closed():
    cv, unsure = case(change=0.05), other_case()
    unsure.status = Status.UNSURE
    v = Verdict(Outcome.REGRESSION, [cv, unsure], unsure_fails=True)
    acceptance.apply(v, parsed(cases=[cv.label]), [], HEAD)
    assert (v.outcome, cv.status, unsure.status) == (Outcome.UNSURE, Status.ACCEPTED, Status.UNSURE)


def test_a_change_of_exactly_the_max_change_is_accepted():
    cv = case(change=0.125)
    v = Verdict(Outcome.REGRESSION, [cv])
    acceptance.apply(v, parsed(cases=[cv.label], max_change=0.125), [], HEAD)
    assert (v.outcome, cv.status) == (Outcome.PASS, Status.ACCEPTED)


def test_a_new_case_under_the_floor_is_refused_though_it_measured_no_slowdown():
    """A case new in head (no base: no change, no drop) fails on the floor alone; an entry cannot accept it."""
    cv = case(below_floor=True)
    v = Verdict(Outcome.REGRESSION, [cv])
    acceptance.apply(v, parsed(cases=[cv.label]), [], HEAD)
    assert (v.outcome, cv.status) == (Outcome.REGRESSION, Status.REGRESSION)
    assert [n.kind for n in cv.reasons] == [Kind.NOT_ACCEPTED]


@pytest.mark.parametrize("text", ["accepted: []\nother: 1", "- 1", "accepted: 3"])
def test_a_file_that_is_not_one_accepted_list_is_refused_naming_it(text):
    with pytest.raises(acceptance.AcceptanceError) as e:
        acceptance.parse(text, "perf-accept.yml")
    assert str(e.value) == "perf-accept.yml: must be one key, `accepted:`, holding a list of entries"


def test_a_file_that_is_not_yaml_is_refused_naming_it_and_yamls_reason():
    with pytest.raises(acceptance.AcceptanceError) as e:
        acceptance.parse("accepted: [", "perf-accept.yml")
    assert str(e.value).startswith("perf-accept.yml: not YAML (while parsing a flow node")
