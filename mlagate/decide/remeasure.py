"""When the interleaved re-measure of a flagged case has seen enough (pure: no GPU, no clock of its own).

Rounds of base and head alternate (measure/interleaved.py); after each, ``judge`` pools the rounds so far and
takes the change's conservative 99% interval (stats.change_interval, the comparison page's): entirely at or above
the threshold is a regression, entirely below it a pass; otherwise the case is re-measured again, until
``max_rounds`` or the PR's ``budget_s`` of re-measuring runs out, and then it is unsure. Fewer than
``min_rounds`` rounds decide nothing while time is left. So a case whose interval straddles the threshold is
never passed: it is measured more or called unsure (perf.yml ``gate.confirm.unsure`` says whether that fails).
"""

import enum
from dataclasses import dataclass

from mlagate.decide.stats import change_interval


class Step(enum.StrEnum):
    CONTINUE = "continue"
    REGRESSION = "regression"
    PASS = "pass"
    UNSURE = "unsure"


@dataclass(frozen=True)
class Judgement:
    step: Step
    interval: tuple | None  # (low, high) of head/base - 1, None with too few samples for one
    rounds: int


def pooled(rounds) -> tuple:
    return tuple(t for r in rounds for t in r)


def classify(base, head, threshold: float, confidence: float = 0.99) -> tuple:
    """(Step.REGRESSION, PASS or UNSURE, interval) of pooled samples: where the interval lies against the
    threshold. No interval (too few samples) is unsure."""
    interval = change_interval(base, head, confidence) if base and head else None
    if interval is None:
        return Step.UNSURE, None
    if interval[0] >= threshold:
        return Step.REGRESSION, interval
    if interval[1] < threshold:
        return Step.PASS, interval
    return Step.UNSURE, interval


def judge(base_rounds, head_rounds, *, threshold: float, min_rounds: int, max_rounds: int, elapsed_s: float,
          budget_s: float, confidence: float = 0.99) -> Judgement:
    """Continue, or the case's verdict, after len(base_rounds) alternated rounds (each a tuple of samples) and
    ``elapsed_s`` of the PR's re-measuring."""
    rounds = min(len(base_rounds), len(head_rounds))
    if rounds == 0:  # every flagged case gets one round, even past the budget: unsure rests on samples too
        return Judgement(Step.CONTINUE, None, 0)
    step, interval = classify(pooled(base_rounds), pooled(head_rounds), threshold, confidence)
    out_of_budget = rounds >= max_rounds or elapsed_s >= budget_s
    if step is not Step.UNSURE and (rounds >= min_rounds or out_of_budget):
        return Judgement(step, interval, rounds)
    return Judgement(Step.UNSURE if out_of_budget else Step.CONTINUE, interval, rounds)


def stop_rule(rule, thresholds: dict):
    """The gate's ``stop_for(case)`` for measure/interleaved.interleaved_until: a case's rounds go on until
    ``judge`` decides it or gate.confirm (``rule``: config.Confirm) runs out; ``thresholds``: case key -> the
    slowdown its re-measure must show. The loop passes the seconds since the re-measure began (its clock)."""
    def stop_for(case):
        def enough(done, elapsed_s: float) -> bool:
            return judge(done["base"], done["head"], threshold=thresholds[case.key], min_rounds=rule.min_rounds,
                         max_rounds=rule.max_rounds, elapsed_s=elapsed_s, budget_s=rule.budget_s).step \
                is not Step.CONTINUE
        return enough
    return stop_for
