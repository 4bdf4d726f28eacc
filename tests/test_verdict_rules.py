"""The interleaved re-measure's unsure reason, word for word: the change it shows, its 99% interval where the
samples give one, the rounds, the threshold inside the interval, and whether perf.yml fails or passes it."""

import copy

import numpy as np
import pytest
import yaml

from mlagate import config
from mlagate.decide import verdict as decide
from mlagate.decide.remeasure import Step
from mlagate.decide.vocabulary import Kind, Note, Status

CASE = ("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense")
RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())


def cfg_with(unsure: str):
    raw = copy.deepcopy(RAW)
    raw["gate"]["latency"]["threshold"] = 0.025
    raw["gate"]["confirm"]["unsure"] = unsure
    return config.parse(raw)


def confirm(cfg, confirmation):
    cv = decide.CaseVerdict(CASE, Status.PASS, reasons=[Note(Kind.LATENCY, "latency +3.0%")], flagged=True)
    step = decide._apply_confirmation(cv, confirmation, cfg, cfg.gate.ratio["cuda"])
    return step, cv


@pytest.mark.parametrize("unsure, how", [("fail", "fails closed"), ("pass", "passes (gate.confirm.unsure: pass)")])
def test_a_re_measure_too_short_for_an_interval_is_unsure_without_one(unsure, how):
    """Three samples a side give no 99% interval of the median: unsure, and the reason shows none."""
    step, cv = confirm(cfg_with(unsure), ((1.0, 1.01, 0.99), (1.1, 1.11, 1.09)))
    assert step is Step.UNSURE and cv.confirmation["interval"] is None
    assert cv.reasons == [Note(Kind.UNSURE, "unsure: the interleaved re-measure shows +10.00% after 1 rounds, the "
                                            f"+2.5% threshold inside it when gate.confirm's rounds or time ran out; "
                                            f"{how}")]


@pytest.mark.parametrize("unsure, how", [("fail", "fails closed"), ("pass", "passes (gate.confirm.unsure: pass)")])
def test_an_unsure_re_measure_shows_its_interval_low_then_high(unsure, how):
    base = tuple(tuple(1e-4 * (1 + 0.02 * v) for v in np.linspace(-1, 1, 50)) for _ in range(4))
    head = tuple(tuple(t * 1.025 for t in r) for r in base)
    step, cv = confirm(cfg_with(unsure), (base, head))
    low, high = cv.confirmation["interval"]
    assert step is Step.UNSURE and low < 0.025 <= high and round(low, 4) != round(high, 4)
    assert cv.reasons == [Note(Kind.UNSURE, f"unsure: the interleaved re-measure shows +2.50% [99% interval "
                                            f"{low:+.2%}, {high:+.2%}] after 4 rounds, the +2.5% threshold inside "
                                            f"it when gate.confirm's rounds or time ran out; {how}")]
