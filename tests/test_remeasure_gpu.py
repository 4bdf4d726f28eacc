"""The adaptive re-measure on a GPU: the gate's own loop (measure/interleaved.alternate_until) and rule
(decide/remeasure.stop_rule) on real launches, the confirm budget of perf.yml. A head doing 30% more work is a
regression; the same launch on both sides is never one; the budget in seconds stops a case the rule cannot decide."""

import pytest

torch = pytest.importorskip("torch")

from mlagate import config  # noqa: E402
from mlagate.decide import remeasure  # noqa: E402
from mlagate.decide.remeasure import Step  # noqa: E402
from mlagate.measure import interleaved  # noqa: E402

gpu = pytest.mark.gpu
CFG = config.load()
CASE = type("Case", (), {"key": ("probe",)})()


def matmuls(count):
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    out = torch.empty_like(a)

    def launch():
        for _ in range(count):
            torch.mm(a, a, out=out)
    return launch


def decide(base, head, rule=CFG.gate.confirm):
    stop_for = remeasure.stop_rule(rule, {CASE.key: CFG.gate.threshold})
    done = interleaved.alternate_until({"base": base, "head": head}, CFG.timing, stop_for(CASE))
    pooled = [remeasure.pooled(done[side]) for side in ("base", "head")]
    return len(done["base"]), remeasure.classify(*pooled, CFG.gate.threshold)[0]


@gpu
def test_a_thirty_percent_slower_head_is_a_regression_within_min_rounds():
    rounds, step = decide(matmuls(10), matmuls(13))
    assert step is Step.REGRESSION and rounds == CFG.gate.confirm.min_rounds


@gpu
def test_the_same_launch_on_both_sides_is_never_a_regression():
    launch = matmuls(10)
    rounds, step = decide(launch, launch)
    assert step in (Step.PASS, Step.UNSURE) and rounds <= CFG.gate.confirm.max_rounds


@gpu
def test_the_seconds_budget_stops_an_undecidable_case():
    """Head at the threshold's worth of extra work (+2.5%): its interval keeps holding the threshold, so only the
    2 s budget stops it, long before 200 rounds (a round of the confirm budget is ~0.3 s)."""
    rule = config.Confirm(min_rounds=2, max_rounds=200, budget_s=2.0, unsure_fails=True)
    rounds, _ = decide(matmuls(40), matmuls(41), rule)
    assert 1 <= rounds < 200
