"""The calibration's simulated gate run, step by step: which recorded rounds the screen and the re-measure draw,
how many samples each draws (with replacement), the slowdown applied to the head's alone, and the curve's shares
over the default 400 trials of a fixed seed. The rule itself is recorded as a spy, so each draw can be read."""

import json

import numpy as np
import pytest

import gate_fixtures as fx
from mlagate.decide import calibration

SHARE = 0.25
LENGTHS = (8, 12, 16, 40, 44, 48, 20, 52, 60)  # a round's samples: 5 drawn from the short ones, a quarter of the long


@pytest.fixture
def rule(monkeypatch):
    """is_slower replaced: records each (base, head) it is given and answers from ``answers`` (then True)."""
    calls, answers = [], []

    def spy(base, head, threshold, alpha):
        calls.append((np.asarray(base), np.asarray(head), threshold, alpha))
        return answers.pop(0) if answers else True

    monkeypatch.setattr(calibration, "is_slower", spy)
    return calls, answers


def rounds_of(n):
    """Round i holds LENGTHS[i] samples, each i + 1: a drawn value says which round it came from."""
    return [[float(i + 1)] * LENGTHS[i] for i in range(n)]


def drawn(values, factor=1.0) -> dict:
    """{round index: samples drawn from it} of one pool."""
    rounds, counts = np.unique(np.round(values / factor).astype(int) - 1, return_counts=True)
    return dict(zip(rounds.tolist(), counts.tolist()))


@pytest.mark.parametrize("n", [6, 9])
def test_the_re_measure_pools_other_rounds_alternately_each_drawn_at_its_share(rule, n):
    calls, _ = rule
    got = calibration.trial(np.random.default_rng(3), rounds_of(n), 0.5, screen=0.01, threshold=0.02, alpha=0.05,
                            confirm_rounds=2, confirm_share=SHARE)
    assert got == (True, True)
    (screen_base, screen_head, *screen_rule), (base, head, *confirm_rule) = calls
    assert screen_rule == [0.01, 0.05] and confirm_rule == [0.02, 0.05]
    # the screen: one whole round resampled per side, the head's slowed by 1.5
    (b,), (h,) = drawn(screen_base), drawn(screen_head, 1.5)
    assert b != h and drawn(screen_base) == {b: LENGTHS[b]} and drawn(screen_head, 1.5) == {h: LENGTHS[h]}
    # the re-measure: two more rounds per side, none the screen's, each max(5, round(samples x share)) draws
    base_rounds, head_rounds = drawn(base), drawn(head, 1.5)
    assert len(base_rounds) == len(head_rounds) == 2
    assert not set(base_rounds) & set(head_rounds) and not {b, h} & (set(base_rounds) | set(head_rounds))
    for pool in (base_rounds, head_rounds):
        assert pool == {i: max(5, round(LENGTHS[i] * SHARE)) for i in pool}
    if n == 6:  # every round drawn once
        assert {b, h} | set(base_rounds) | set(head_rounds) == set(range(6))


def test_short_rounds_are_resampled_with_replacement(rule):
    """Three samples a round, five drawn in the re-measure: only a draw with replacement has them."""
    calls, _ = rule
    rounds = [[1.0, 2.0, 3.0]] * 4
    assert calibration.trial(np.random.default_rng(0), rounds, 0.0, screen=0.01, threshold=0.02, alpha=0.05,
                             confirm_rounds=1, confirm_share=SHARE) == (True, True)
    (_, _, *_), (base, head, *_) = calls
    assert len(base) == len(head) == 5 and set(base) <= {1.0, 2.0, 3.0} and set(head) <= {1.0, 2.0, 3.0}


def test_an_unscreened_trial_is_neither_screened_nor_failed_and_is_not_re_measured(rule):
    calls, answers = rule
    answers.append(False)
    assert calibration.trial(np.random.default_rng(0), rounds_of(6), 0.5, screen=0.01, threshold=0.02, alpha=0.05,
                             confirm_rounds=2, confirm_share=SHARE) == (False, False)
    assert len(calls) == 1


def test_the_curve_reports_the_screened_and_the_failed_shares_apart(rule):
    _, answers = rule
    answers.extend([True, False] * 4)  # every trial screened, none confirmed
    assert calibration.detection_curve(rounds_of(4), [0.05], screen=0.01, threshold=0.02, alpha=0.05,
                                       confirm_rounds=1, confirm_share=SHARE, trials=4) == [(0.05, 1.0, 0.0)]


def test_the_curve_runs_400_trials_per_slowdown_by_default(rule):
    calls, answers = rule
    answers.extend([False] * 800)
    curve = calibration.detection_curve(rounds_of(4), [0.0, 0.1], screen=0.01, threshold=0.02, alpha=0.05,
                                        confirm_rounds=1, confirm_share=SHARE)
    assert curve == [(0.0, 0.0, 0.0), (0.1, 0.0, 0.0)] and len(calls) == 800


def test_the_fewest_rounds_are_two_plus_two_per_re_measure_round(rule):
    kw = dict(screen=0.01, threshold=0.02, alpha=0.05, confirm_share=SHARE, trials=2)
    assert calibration.detection_curve(rounds_of(4), [0.0], confirm_rounds=1, **kw) == [(0.0, 1.0, 1.0)]
    with pytest.raises(ValueError) as e:
        calibration.detection_curve(rounds_of(5), [0.0], confirm_rounds=2, **kw)
    assert str(e.value) == "need at least 6 rounds for confirm_rounds=2, got 5"


def test_the_curve_is_the_same_on_every_run_of_seed_0_by_default():
    """On recorded noise at a slowdown near the threshold, where the shares depend on the draws."""
    rounds = json.loads((fx.FIXTURES / "noise_study_2026-11-29.json").read_text())
    rounds = rounds["tilelang-hopper b=128 s=8192 float16"]["samples"]
    kw = dict(screen=0.01, threshold=0.02, alpha=0.01, confirm_rounds=2, confirm_share=SHARE, trials=10)
    default = calibration.detection_curve(rounds, [0.015], **kw)
    assert default == calibration.detection_curve(rounds, [0.015], seed=0, **kw)
    assert default != calibration.detection_curve(rounds, [0.015], seed=1, **kw)
