"""The latency rule meets its calibration targets on recorded H200 noise."""

import json

import pytest

import gate_fixtures as fx
from mlagate import config
from mlagate.decide import calibration

NOISE = json.loads((fx.FIXTURES / "noise_study_2026-11-29.json").read_text())


def confirm_share():
    b = config.load().timing.budgets
    return b["confirm"].windows / b["record"].windows


@pytest.mark.parametrize("case", sorted(NOISE))
def test_five_percent_fails_and_no_change_passes(case):
    g = config.load().gate
    rounds = NOISE[case]["samples"]
    curve = calibration.detection_curve(rounds, [0.0, 0.05], screen=g.screen, threshold=g.threshold, alpha=g.alpha,
                                        confirm_rounds=min(g.confirm.min_rounds, (len(rounds) - 2) // 2),
                                        confirm_share=confirm_share(), trials=200)
    (_, _, false_alarm), (_, _, detected) = curve
    assert false_alarm <= 0.01
    assert detected >= 0.95


def test_without_confirmation_a_single_run_misses_more():
    """The screen alone, at the threshold, on the case with the most drift: the
    re-measure is what lets the gate use a lower screen."""
    g = config.load().gate
    rounds = NOISE["tilelang-hopper b=128 s=8192 float16"]["samples"]
    (_, screened, _), = calibration.detection_curve(rounds, [0.05], screen=g.threshold, threshold=g.threshold,
                                                    alpha=g.alpha, confirm_rounds=6, confirm_share=confirm_share(),
                                                    trials=200)
    assert screened < 0.95


def test_too_few_rounds_is_an_error():
    with pytest.raises(ValueError, match="need at least 12 rounds"):
        calibration.detection_curve([[1.0]] * 5, [0.0], screen=0.01, threshold=0.02, alpha=0.01, confirm_rounds=5,
                                        confirm_share=0.2)
