"""`mlagate bisect` on a CPU: the search, skip and verdict logic on recorded H200 samples, and the
pipeline's refusals. The GPU run (records and interleaved re-measures) is in the README."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import gate_fixtures as fx
from mlagate import cli, config, gitops
from mlagate.bisect.rules import Finding, Result, _pick, search
from mlagate.bisect.run import drift, first_parent_commits
from mlagate.store.errors import GateError
from mlagate.store.results import Store

NOISE = Path(__file__).parent / "fixtures" / "h200" / "noise_study_2026-11-29.json"
THRESHOLD = config.load().gate.threshold


def recorded_rounds():
    return [np.asarray(r, dtype=float) for r in json.loads(NOISE.read_text())["tilelang-hopper b=64 s=1024 float16"]
            ["samples"]]


def series(slowdowns, seed):
    """change_of for commits c0 (good) .. cN, as the interleaved re-measure sees them: good's and the commit's
    samples both drawn from one recorded round (they are timed in alternation), the commit's slowed by its
    slowdown; each call another round. Counts the calls."""
    rounds, rng = recorded_rounds(), np.random.default_rng(seed)
    commits = [f"{i:040x}" for i in range(len(slowdowns))]
    calls = []

    def change_of(commit):
        calls.append(commit)
        i = commits.index(commit)
        samples = rounds[rng.integers(len(rounds))]
        base, head = rng.choice(samples, 300), rng.choice(samples, 300)
        return float(np.median(head * (1 + slowdowns[i])) / np.median(base) - 1)

    return commits, change_of, calls


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n, at", [(9, 4), (9, 1), (9, 8), (16, 11)])
def test_a_step_in_the_middle_is_named_within_log2_plus_one_measurements(n, at, seed):
    commits, change_of, calls = series([0.0] * at + [0.06] * (n - at), seed)
    result = search(commits, change_of, THRESHOLD)
    assert (result.finding, result.culprit, result.last_good) == (Finding.CULPRIT, commits[at], commits[at - 1])
    assert len(calls) <= math.ceil(math.log2(n - 1)) + 1
    assert 0.06 - THRESHOLD / 2 < result.step_change < 0.06 + THRESHOLD / 2


@pytest.mark.parametrize("seed", range(5))
def test_no_slowdown_names_no_commit(seed):
    commits, change_of, calls = series([0.0] * 9, seed)
    result = search(commits, change_of, THRESHOLD)
    assert (result.finding, result.culprit, calls) == (Finding.NO_DRIFT, None, [commits[-1]])


@pytest.mark.parametrize("seed", range(3))
def test_a_drift_spread_over_commits_is_called_gradual(seed):
    commits, change_of, _ = series([0.012 * i for i in range(9)], seed)
    result = search(commits, change_of, THRESHOLD)
    assert result.finding is Finding.GRADUAL
    assert result.step_change < THRESHOLD and "gradual" in result.text()


def test_a_skipped_commit_is_stepped_around_and_named_when_it_hides_the_step():
    commits, change_of, _ = series([0.0] * 4 + [0.06] * 5, 0)
    skip = {commits[4]}  # the culprit itself cannot be measured (does not build)
    result = search(commits, lambda c: None if c in skip else change_of(c), THRESHOLD)
    assert result.finding is Finding.UNTESTABLE and result.skipped == [commits[4]]
    assert (result.last_good, result.culprit) == (commits[3], commits[5])

    skip = {commits[2]}  # a good commit that cannot be measured: the search goes around it
    result = search(commits, lambda c: None if c in skip else change_of(c), THRESHOLD)
    assert (result.finding, result.culprit) == (Finding.CULPRIT, commits[4])
    assert result.skipped == []


def test_an_unmeasurable_bad_commit_says_so():
    result = search(["a" * 40, "b" * 40], lambda c: None, THRESHOLD)
    assert result.finding is Finding.UNMEASURED and "could not be measured" in result.text()


def test_good_is_the_recorded_commit_the_drift_warning_compares_with(tmp_path):
    store = Store(fx.RESULTS)
    base, slow, docs = (store.load(fx.MACHINE, c) for c in (fx.BASE, fx.SLOW, fx.DOCS))
    good, cases = drift([base], slow, max_slowdown=0.05)
    assert good == fx.BASE and {c.impl for c in cases} == {"tilelang-hopper"} and len(cases) == 2
    assert drift([base], docs, max_slowdown=0.05) == (None, [])


def test_the_command_refuses_without_a_gpu_and_stores_nothing(tmp_path, capsys, monkeypatch):
    import mlagate.bisect.run as pipeline

    results = tmp_path / "results"
    shutil.copytree(fx.RESULTS, results)
    before = sorted(p.name for p in (results / fx.MACHINE).iterdir())
    monkeypatch.setattr(pipeline, "first_parent_commits", lambda good, bad: [good, bad])
    code = cli.main(["bisect", "--good", fx.BASE, "--bad", fx.SLOW, "--machine", fx.MACHINE,
                     "--results", str(results), "--out", str(tmp_path / "out")])
    assert code == 2 and "no GPU" in capsys.readouterr().err
    assert sorted(p.name for p in (results / fx.MACHINE).iterdir()) == before


def test_no_drift_between_recorded_commits_exits_0_without_measuring(tmp_path, capsys):
    code = cli.main(["bisect", "--good", fx.BASE, "--bad", fx.DOCS, "--machine", fx.MACHINE,
                     "--results", str(fx.RESULTS), "--out", str(tmp_path)])
    assert code == 0
    assert json.loads((tmp_path / "bisect.json").read_text())["finding"] == "no_drift"


def test_a_bad_commit_that_is_not_after_good_is_an_error(tmp_path, capsys):
    code = cli.main(["bisect", "--good", fx.SLOW, "--bad", "HEAD", "--machine", fx.MACHINE,
                     "--results", str(fx.RESULTS), "--out", str(tmp_path)])
    assert code == 2


def test_the_commits_run_from_good_to_bad_along_first_parents():
    head, parent = gitops.resolve("HEAD"), gitops.resolve("HEAD~1")
    assert first_parent_commits(parent, head) == [parent, head]
    with pytest.raises(GateError, match="not a first-parent descendant"):
        first_parent_commits(head, parent)


# -- each rule's boundary, on exact series (no noise): a flipped comparison, a halved or doubled constant or a
# dropped rule in bisect/rules.py changes at least one of these findings.

T = 0.04  # a threshold of the tests' own: the rules take it as an argument


def decided(changes):
    """search() over commits c0 (good) .. cN whose change against good is ``changes[i]`` exactly."""
    commits = [f"{i:040x}" for i in range(len(changes))]
    result = search(commits, lambda c: changes[commits.index(c)], T)
    return result, commits


@pytest.mark.parametrize("total, finding", [(T, Finding.CULPRIT), (T * 0.99, Finding.NO_DRIFT)],
                         ids=["exactly the threshold", "just under it"])
def test_a_step_of_exactly_the_threshold_is_a_culprit_and_one_just_under_is_no_drift(total, finding):
    result, commits = decided([0.0, 0.0, total, total])
    assert result.finding is finding
    if finding is Finding.CULPRIT:
        assert (result.last_good, result.culprit, result.step_change) == (commits[1], commits[2], T)


def test_a_step_of_half_the_threshold_is_not_a_culprit():
    # The whole drift reaches the threshold, but in two steps of half of it each: the search lands on the first
    # step that carries half the drift, and a step that small is gradual drift, not a culprit.
    result, commits = decided([0.0, T / 2, T, T])
    assert (result.finding, result.last_good, result.culprit, result.step_change) == (
        Finding.GRADUAL, commits[0], commits[1], T / 2)
    assert decided([0.0, 0.0, T / 2, T / 2])[0].finding is Finding.NO_DRIFT


@pytest.mark.parametrize("first, bad_at", [(0.45, 2), (0.5, 1), (0.55, 1)], ids=["45/55", "50/50", "55/45"])
def test_the_commit_carrying_half_the_drift_or_more_is_bad(first, bad_at):
    # Two commits share a drift of 4 thresholds: the first one is bad when it carries at least half of it.
    total = 4 * T
    result, commits = decided([0.0, first * total, total])
    assert (result.last_good, result.culprit) == (commits[bad_at - 1], commits[bad_at])
    assert result.step_change == pytest.approx(total * (first if bad_at == 1 else 1 - first))
    assert result.finding is Finding.GRADUAL  # neither side agrees with its end within half a threshold


@pytest.mark.parametrize("before, finding", [(0.4 * T, Finding.CULPRIT), (T / 2, Finding.GRADUAL),
                                             (-0.4 * T, Finding.CULPRIT), (-T / 2, Finding.GRADUAL)],
                         ids=["0.4T", "T/2", "-0.4T", "-T/2"])
def test_the_commit_before_the_culprit_must_be_within_half_a_threshold_of_good(before, finding):
    result, commits = decided([0.0, before, before + 2 * T, before + 2 * T])
    assert (result.finding, result.last_good, result.culprit) == (finding, commits[1], commits[2])


@pytest.mark.parametrize("after, finding", [(0.4 * T, Finding.CULPRIT), (T / 2, Finding.GRADUAL),
                                            (-0.4 * T, Finding.CULPRIT), (-T / 2, Finding.GRADUAL)],
                         ids=["0.4T", "T/2", "-0.4T", "-T/2"])
def test_the_culprit_must_be_within_half_a_threshold_of_bad(after, finding):
    result, commits = decided([0.0, 0.0, 2 * T, 2 * T + after])
    assert (result.finding, result.last_good, result.culprit) == (finding, commits[1], commits[2])


# -- the search's record, exactly: what the report prints and the issue opened on main quotes -----------------

def _search_of(changes: dict, threshold=0.025):
    return search(list(changes), lambda c: changes[c], threshold)


def test_a_culprit_search_records_every_step_in_order_and_says_so():
    # 9 commits, good first: the step is at commit 6 (0 -> 10%)
    changes = {f"c{i}{'0' * 12}": (0.10 if i >= 6 else 0.0) for i in range(9)}
    changes["c0" + "0" * 12] = None  # good itself is never asked: its change is 0 by definition
    result = _search_of(changes)
    names = list(changes)
    assert [(s.commit, s.change, s.bad) for s in result.steps] == [
        (names[8], 0.10, True), (names[4], 0.0, False), (names[6], 0.10, True), (names[5], 0.0, False)]
    assert (result.finding, result.culprit, result.last_good) == ("culprit", names[6], names[5])
    assert result.step_change == 0.10 and result.total == 0.10 and result.skipped == []
    assert result.text() == (f"{names[6][:10]} is the first slow commit: +10.0% against {names[5][:10]} "
                             "(whole drift +10.0%, 4 commits measured)")


def test_a_skipped_middle_commit_is_stepped_around_and_an_all_skipped_gap_is_untestable():
    names = [f"k{i}{'0' * 12}" for i in range(6)]
    changes = dict(zip(names, [0.0, 0.0, None, None, 0.10, 0.10]))
    result = _search_of(changes)
    # the middle (2) is skipped, its neighbour 3 too, then 1 is good; 2 and 3 remain, both skipped
    assert [(s.commit, s.change, s.bad) for s in result.steps] == [
        (names[5], 0.10, True), (names[2], None, None), (names[3], None, None), (names[1], 0.0, False),
        (names[4], 0.10, True)]
    assert (result.finding, result.last_good, result.culprit) == ("untestable", names[1], names[4])
    assert result.skipped == [names[2], names[3]]
    assert result.text() == (f"the step is somewhere in {names[2][:10]}, {names[3][:10]} (every one skipped), "
                             f"after {names[1][:10]}")


def test_the_other_findings_say_what_was_measured():
    names = [f"g{i}{'0' * 12}" for i in range(5)]
    gradual = _search_of(dict(zip(names, [0.0, 0.02, 0.04, 0.06, 0.08])))
    assert gradual.finding == "gradual" and (gradual.last_good, gradual.culprit) == (names[1], names[2])
    assert gradual.text() == (f"no single culprit: between {names[1][:10]} and {names[2][:10]} the step is "
                              "+2.0% of a +8.0% drift (gradual, or noise)")
    none = _search_of(dict(zip(names, [0.0, 0.0, 0.0, 0.0, 0.01])))
    assert none.finding == "no_drift" and none.text() == "no drift: the bad commit is +1.0% against the good one"
    assert [(s.commit, s.change, s.bad) for s in none.steps] == [(names[4], 0.01, True)]
    unmeasured = _search_of(dict(zip(names, [0.0, 0.0, 0.0, 0.0, None])))
    assert unmeasured.finding == "unmeasured" and unmeasured.steps[0].bad is None
    assert unmeasured.text() == f"the bad commit {names[4][:10]} could not be measured"
    assert Result(Finding.NO_DRIFT, names).text() == ("no drift: no case of the bad commit is slower than its best "
                                                      "recent recorded result by the limit")


def test_pick_takes_the_middle_then_its_nearest_untried_neighbours():
    assert _pick(0, 8, set()) == 4 and _pick(0, 8, {4}) == 5 and _pick(0, 8, {4, 5}) == 3
    assert _pick(0, 8, {3, 4, 5}) == 6 and _pick(0, 8, {1, 2, 3, 4, 5, 6, 7}) is None
    assert _pick(2, 3, set()) is None and _pick(2, 4, set()) == 3


def test_a_culprit_half_a_threshold_short_of_bad_is_not_one():
    """The both-ends rule at its boundary, in numbers binary floating point holds exactly: the culprit's change
    must be strictly within half a threshold of bad's (1.0 - 0.875 = 0.125 = 0.25 / 2 is not)."""
    names = [f"e{i}{'0' * 12}" for i in range(3)]
    at = search(names, dict(zip(names, [0.0, 0.875, 1.0])).get, 0.25)
    assert (at.finding, at.culprit, at.step_change) == ("gradual", names[1], 0.875)
    inside = search(names, dict(zip(names, [0.0, 0.9375, 1.0])).get, 0.25)
    assert inside.finding == "culprit" and inside.culprit == names[1]
