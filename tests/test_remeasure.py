"""The adaptive re-measure (mlagate.decide.remeasure), the unsure verdict through gate.md, verdict.json and the
exit code, and the detectable change (mlagate.decide.stats.detectable_change). CPU only: the loop runs on a fake
timer and a fake clock, never sleeping."""

import copy
import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
import yaml

from mlagate import config, exits
from mlagate.cli.calibrate import noise_rounds
from mlagate.decide import remeasure, stats
from mlagate.decide import verdict as decide
from mlagate.decide.remeasure import Step
from mlagate.decide.vocabulary import Kind, Outcome, Status
from mlagate.measure import interleaved, summary
from mlagate.report.text import gate_markdown, verdict_dict
from mlagate.store.results import CommitResults
from mlagate.store.results_file import BENCH_RATIO, BENCH_TIME, Entry

HOP = ("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense")
RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())
NOISE = "tests/fixtures/h200/noise_study_2026-11-29.json"
THRESHOLD = 0.025


def make_cfg(**confirm):
    raw = copy.deepcopy(RAW)
    raw["gate"]["gated"] = ["tilelang-hopper", "tilelang-cdna3"]
    raw["platforms"]["cuda"]["tilelang"] = HOP[0]
    raw["gate"]["latency"].update(threshold=THRESHOLD, screen=0.0125, alpha=0.01)
    raw["gate"]["confirm"].update(confirm)
    return config.parse(raw)


def judge(base_rounds, head_rounds, *, elapsed_s=0.0, min_rounds=6, max_rounds=30, budget_s=120.0):
    return remeasure.judge(base_rounds, head_rounds, threshold=THRESHOLD, min_rounds=min_rounds,
                           max_rounds=max_rounds, elapsed_s=elapsed_s, budget_s=budget_s)


def recorded_rounds():
    """The H200 noise study's rounds (per-call times in s) of one case: 15 rounds, interleaved in one process."""
    return [tuple(t / 1e3 for t in r) for r in noise_rounds(Path(NOISE))["tilelang-hopper b=64 s=1024 float16"]]


def normal_rounds(rng, median, sd, rounds, n=200):
    return [tuple(rng.normal(median, sd, n)) for _ in range(rounds)]


def run_until_decided(base_all, head_all, **limits):
    """Feed rounds one at a time, as the loop does; (judgement, rounds used)."""
    for r in range(len(base_all) + 1):
        j = judge(base_all[:r], head_all[:r], **limits) if r else remeasure.Judgement(Step.CONTINUE, None, 0)
        if j.step is not Step.CONTINUE:
            return j
    raise AssertionError("the rule never stopped within the rounds given")


# -- the rule -------------------------------------------------------------------------

def test_a_clear_slowdown_of_recorded_rounds_is_a_regression_at_min_rounds():
    rounds = recorded_rounds()
    base, head = rounds[0::2], [tuple(t * 1.08 for t in r) for r in rounds[1::2]]
    j = run_until_decided(base, head, min_rounds=6, max_rounds=7)
    assert j.step is Step.REGRESSION and j.rounds == 6 and j.interval[0] >= THRESHOLD


def test_no_change_on_recorded_rounds_passes_and_never_regresses():
    rounds = recorded_rounds()
    j = run_until_decided(rounds[0::2], rounds[1::2], min_rounds=6, max_rounds=7)
    assert j.step is Step.PASS and j.interval[1] < THRESHOLD


def test_fewer_than_min_rounds_decide_nothing_while_budget_is_left():
    rng = np.random.default_rng(0)
    base, head = normal_rounds(rng, 1e-4, 1e-6, 5), normal_rounds(rng, 1.1e-4, 1e-6, 5)
    assert judge(base, head, min_rounds=6).step is Step.CONTINUE
    assert judge(base, head, min_rounds=5).step is Step.REGRESSION
    assert judge([], [], elapsed_s=1e9).step is Step.CONTINUE  # every flagged case gets its first round


@pytest.mark.parametrize("seed", range(5))
def test_an_interval_that_straddles_the_threshold_is_never_passed(seed):
    """Head exactly at the threshold: every round the interval holds it, so the rule measures on, then says
    unsure at max_rounds; never pass, never regression."""
    rng = np.random.default_rng(seed)
    base = normal_rounds(rng, 1e-4, 2e-6, 12)
    head = normal_rounds(rng, 1e-4 * (1 + THRESHOLD), 2e-6, 12)
    seen = []
    for r in range(1, 13):
        j = judge(base[:r], head[:r], min_rounds=2, max_rounds=12)
        seen.append(j.step)
        if j.interval is not None and j.interval[0] < THRESHOLD <= j.interval[1]:
            assert j.step in (Step.CONTINUE, Step.UNSURE)
    assert seen[-1] is Step.UNSURE and Step.PASS not in seen and Step.REGRESSION not in seen


def test_the_round_budget_is_respected():
    rng = np.random.default_rng(1)
    base = normal_rounds(rng, 1e-4, 2e-6, 40)
    head = normal_rounds(rng, 1e-4 * (1 + THRESHOLD), 2e-6, 40)
    j = run_until_decided(base, head, min_rounds=2, max_rounds=9)
    assert j.step is Step.UNSURE and j.rounds == 9


def test_the_time_budget_is_respected_with_a_fake_clock():
    """The loop itself (measure/interleaved.alternate_until) on a fake timer: every round advances a fake
    clock by 1 s; with a 5 s budget a straddling case stops after 5 rounds, unsure, and nothing sleeps."""
    rng = np.random.default_rng(2)
    now = [0.0]
    medians = {"base": 1e-4, "head": 1e-4 * (1 + THRESHOLD)}

    class FakeSamples:
        def __init__(self, median):
            self.times_ms = tuple(rng.normal(median, 2e-6, 200) * 1e3)

    def fake_time_gpu(launch, timing, budget, device=None):
        now[0] += 0.5  # each side of a round: half a fake second
        return FakeSamples(launch())

    rule = make_cfg(min_rounds=2, max_rounds=1000, budget_s=5).gate.confirm
    stop_for = remeasure.stop_rule(rule, {HOP: THRESHOLD})
    case = type("C", (), {"key": HOP})()
    original = interleaved.time_gpu
    interleaved.time_gpu = fake_time_gpu
    try:
        done = interleaved.alternate_until({"base": lambda: medians["base"], "head": lambda: medians["head"]},
                                           None, stop_for(case), clock=lambda: now[0])
    finally:
        interleaved.time_gpu = original
    assert len(done["base"]) == len(done["head"]) == 5 and now[0] == 5.0
    step, interval = remeasure.classify(remeasure.pooled(done["base"]), remeasure.pooled(done["head"]), THRESHOLD)
    assert step is Step.UNSURE and interval[0] < THRESHOLD <= interval[1]


def test_the_fixed_round_count_still_serves_bisect():
    calls = []

    def fake_time_gpu(launch, timing, budget, device=None):
        calls.append(launch())
        return type("S", (), {"times_ms": (1.0, 1.0)})()

    original = interleaved.time_gpu
    interleaved.time_gpu = fake_time_gpu
    try:
        out = interleaved.alternate({"a": lambda: "a", "b": lambda: "b"}, None, 3)
    finally:
        interleaved.time_gpu = original
    assert calls == ["a", "b", "b", "a", "a", "b"] and out == {"a": (1e-3,) * 6, "b": (1e-3,) * 6}


# -- the verdict ----------------------------------------------------------------------

def results(commit, times, ratio=0.8):
    entry = Entry("ok", summary.median(times), tuple(times))
    return CommitResults("m", commit, 0, [], {BENCH_TIME: {HOP: entry}, BENCH_RATIO: {HOP: Entry("ok", ratio)}})


def flagged_gate(cfg, confirmation):
    """A case the record flags (+3%), then the given re-measure decides."""
    base = tuple(1e-4 * (1 + 0.002 * v) for v in np.linspace(-1, 1, 40))
    head = tuple(t * 1.03 for t in base)
    return decide.evaluate(results("b" * 40, base), results("h" * 40, head), cfg, "cuda",
                           confirmations={HOP: confirmation})


def straddling(rounds=8):
    rng = np.random.default_rng(3)
    return (tuple(normal_rounds(rng, 1e-4, 2e-6, rounds)),
            tuple(normal_rounds(rng, 1e-4 * (1 + THRESHOLD), 2e-6, rounds)))


def test_an_unsure_case_fails_closed_with_exit_2_and_shows_its_interval():
    v = flagged_gate(make_cfg(unsure="fail"), straddling())
    cv = v.cases[0]
    assert cv.status is Status.UNSURE and v.outcome is Outcome.UNSURE and v.exit_code == exits.ERROR == 2
    assert [n.kind for n in cv.reasons] == [Kind.UNSURE]
    low, high = cv.confirmation["interval"]
    assert low < THRESHOLD <= high and cv.confirmation["decision"] == "unsure" and cv.confirmation["rounds"] == 8
    md = gate_markdown(v)
    assert "unsure (could not decide: fails closed)" in md and "❔ unsure" in md
    assert f"[99% interval {low:+.2%}, {high:+.2%}]" in md and "fails closed" in cv.reasons[0].text
    doc = json.loads(json.dumps(verdict_dict(v), default=str))
    assert doc["outcome"] == "unsure" and doc["exit_code"] == 2 and doc["cases"][0]["status"] == "unsure"
    assert doc["cases"][0]["confirmation"]["interval"] == [low, high] and doc["summary"]["unsure"] == 1


def test_an_unsure_case_passes_with_a_warning_where_perf_yml_says_pass():
    v = flagged_gate(make_cfg(unsure="pass"), straddling())
    cv = v.cases[0]
    assert cv.status is Status.UNSURE and v.outcome is Outcome.PASS and v.exit_code == 0
    assert Kind.UNSURE_PASSED in [w.kind for w in cv.warnings]


def test_a_regression_outweighs_an_unsure_case_and_is_exit_1():
    v = flagged_gate(make_cfg(), straddling())
    v.cases[0].status = Status.REGRESSION  # as a second, regressed case would
    assert decide.Verdict(Outcome.REGRESSION, v.cases).exit_code == exits.REGRESSION == 1


def test_a_clear_re_measure_decides_and_keeps_its_rounds():
    rng = np.random.default_rng(4)
    base, head = normal_rounds(rng, 1e-4, 1e-6, 6), normal_rounds(rng, 1.05e-4, 1e-6, 6)
    cv = flagged_gate(make_cfg(), (tuple(base), tuple(head))).cases[0]
    assert cv.status is Status.REGRESSION and cv.confirmation["decision"] == "regression"
    assert cv.confirmation["rounds"] == 6 and cv.confirmation["samples"] == (1200, 1200)
    assert cv.detectable_from == "re-measure"


# -- the detectable change --------------------------------------------------------------

@pytest.mark.parametrize("sd, n", [(0.01, 500), (0.02, 1000), (0.005, 2000), (0.03, 800)])  # IQR-read sd: n >= 500
def test_the_detectable_change_matches_the_z_based_value_on_normal_samples(sd, n):
    rng = np.random.default_rng(int(sd * 1e4) + n)
    alpha, power = 0.01, 0.8
    base, head = rng.normal(1.0, sd, n), rng.normal(1.0, sd, n)
    z = NormalDist().inv_cdf
    analytic = (z(1 - alpha) + z(power)) * sd * math.sqrt(2 / n)
    assert stats.detectable_change(base, head, alpha, power) == pytest.approx(analytic, rel=0.10)


def test_a_case_whose_samples_cannot_show_the_threshold_is_under_powered_not_a_silent_pass():
    rng = np.random.default_rng(5)
    base = tuple(1e-4 * (1 + rng.normal(0, 0.05, 30)))  # 5% sd, 30 samples: ~3% detectable
    head = tuple(t * 1.005 for t in base)
    cv = decide.evaluate(results("b" * 40, base), results("h" * 40, head), make_cfg(), "cuda").cases[0]
    assert cv.status is Status.PASS and cv.detectable > THRESHOLD and cv.detectable_from == "record"
    assert [w.kind for w in cv.warnings if w.kind is Kind.UNDER_POWERED] == [Kind.UNDER_POWERED]
    tight = tuple(1e-4 * (1 + 0.002 * v) for v in np.linspace(-1, 1, 40))
    ok = decide.evaluate(results("b" * 40, tight), results("h" * 40, tight), make_cfg(), "cuda").cases[0]
    assert ok.detectable < THRESHOLD and Kind.UNDER_POWERED not in [w.kind for w in ok.warnings]
    assert "| detectable |" in gate_markdown(decide.Verdict(Outcome.PASS, [cv]))


def test_the_detectable_change_needs_two_samples_on_each_side_and_no_more():
    two, one = (1.0, 1.02), (1.0,)
    assert stats.detectable_change(two, two, 0.01) is not None
    assert stats.detectable_change(one, two, 0.01) is None and stats.detectable_change(two, one, 0.01) is None


def test_the_interval_decides_at_its_bounds_exactly(monkeypatch):
    """classify's boundaries: a low bound exactly at the threshold is a regression, a high bound exactly at it is no
    pass; the interval is the gate's 99% one, taken only where both sides have samples."""
    seen = []

    def interval(base, head, confidence=0.99):
        seen.append(confidence)
        return bounds[0]

    monkeypatch.setattr(remeasure, "change_interval", interval)
    for bounds, step in ([(THRESHOLD, 0.5)], Step.REGRESSION), ([(0.0, THRESHOLD)], Step.UNSURE), \
            ([(0.0, THRESHOLD * 0.999)], Step.PASS):
        assert remeasure.classify((1.0,) * 3, (1.0,) * 3, THRESHOLD)[0] is step
    assert seen == [0.99] * 3
    remeasure.classify((1.0,) * 3, (1.0,) * 3, THRESHOLD, confidence=0.95)  # the caller's confidence, passed on
    assert seen[-1] == 0.95
    assert remeasure.classify((), (1.0,) * 3, THRESHOLD) == (Step.UNSURE, None) and len(seen) == 4


def test_the_stop_rule_holds_a_clear_case_to_min_rounds():
    """A case clear after one round still runs gate.confirm.min_rounds rounds before the stop rule lets it go."""
    rule = make_cfg(min_rounds=4, max_rounds=30, budget_s=1000).gate.confirm
    enough = remeasure.stop_rule(rule, {HOP: THRESHOLD})(type("C", (), {"key": HOP})())
    slow = tuple(1e-4 * (1.2 + 1e-4 * i) for i in range(50))
    fast = tuple(1e-4 * (1 + 1e-4 * i) for i in range(50))
    assert not enough({"base": [fast] * 3, "head": [slow] * 3}, 0.0)
    assert enough({"base": [fast] * 4, "head": [slow] * 4}, 0.0)


def test_both_medians_intervals_take_the_callers_confidence():
    """change_interval at 50%: the ratio of the far ends of both medians' 50% intervals (not one side's 99%)."""
    base = tuple(1.0 + 0.01 * i for i in range(41))
    head = tuple(1.1 + 0.02 * i for i in range(41))
    (b_lo, b_hi), (h_lo, h_hi) = summary.median_ci(base, 0.5), summary.median_ci(head, 0.5)
    assert stats.change_interval(base, head, 0.5) == (h_lo / b_hi - 1, h_hi / b_lo - 1)
    assert stats.change_interval(base, head, 0.5) != stats.change_interval(base, head)


def test_no_round_yet_continues_with_no_interval_and_zero_rounds():
    assert judge([], []) == remeasure.Judgement(Step.CONTINUE, None, 0)


def test_a_continuing_case_carries_its_interval_so_far():
    fast, slow = [tuple(1e-4 * (1 + 1e-4 * i) for i in range(50))] * 2, [tuple(1.2e-4 * (1 + 1e-4 * i)
                                                                           for i in range(50))] * 2
    j = judge(fast, slow)  # clear, but under min_rounds: it goes on, and says where the interval stands
    assert j.step is Step.CONTINUE and j.rounds == 2
    assert j.interval == stats.change_interval(remeasure.pooled(fast), remeasure.pooled(slow))


def test_the_judge_passes_its_confidence_to_the_interval():
    """A 4% slowdown with a wide spread: its 99% interval straddles the threshold, its 50% one lies above it."""
    rng = np.random.default_rng(3)
    base, head = normal_rounds(rng, 1.0, 0.05, 6, n=20), normal_rounds(rng, 1.04, 0.05, 6, n=20)
    limits = dict(threshold=THRESHOLD, min_rounds=6, max_rounds=30, elapsed_s=0.0, budget_s=120.0)
    assert remeasure.judge(base, head, **limits).step is Step.CONTINUE
    assert remeasure.judge(base, head, confidence=0.5, **limits).step is Step.REGRESSION
