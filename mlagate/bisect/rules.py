"""Which commit made main slower: a binary search over first-parent commits. Pure: no I/O.

The caller measures a commit and returns its change against the good commit (head/good - 1 of the
medians, the worst of the drifting cases, from an interleaved re-measure), or None where the commit
cannot be measured (it does not build or fails correctness: skipped, as ``git bisect skip`` does).
A commit is bad when it carries at least half of the whole drift. The search names a culprit only
when the step at it is at least the gate's threshold and both sides agree with the ends (the commit
before it within half a threshold of good, the culprit within half a threshold of bad); otherwise the
drift is gradual or noise, and the result says so with the numbers.
"""

import enum
from dataclasses import dataclass, field


class Finding(enum.StrEnum):
    CULPRIT = "culprit"
    NO_DRIFT = "no_drift"  # bad is not slower than good by the threshold: nothing to find
    GRADUAL = "gradual"  # the drift is spread over several commits, or the step is noise
    UNTESTABLE = "untestable"  # every commit that could hold the step was skipped
    UNMEASURED = "unmeasured"  # the bad commit itself could not be measured


@dataclass
class Step:
    commit: str
    change: float | None  # against good; None: skipped
    bad: bool | None = None


@dataclass
class Result:
    finding: Finding
    commits: list  # good first, bad last
    steps: list = field(default_factory=list)  # in the order measured
    culprit: str | None = None
    last_good: str | None = None
    step_change: float | None = None  # culprit's change minus last good's
    total: float | None = None
    skipped: list = field(default_factory=list)

    def text(self) -> str:
        total = "—" if self.total is None else f"{self.total:+.1%}"
        if self.finding is Finding.CULPRIT:
            return (f"{self.culprit[:10]} is the first slow commit: {self.step_change:+.1%} against "
                    f"{self.last_good[:10]} (whole drift {total}, {len(self.steps)} commits measured)")
        if self.finding is Finding.NO_DRIFT and self.total is None:
            return "no drift: no case of the bad commit is slower than its best recent recorded result by the limit"
        if self.finding is Finding.NO_DRIFT:
            return f"no drift: the bad commit is {total} against the good one"
        if self.finding is Finding.GRADUAL:
            return (f"no single culprit: between {self.last_good[:10]} and {self.culprit[:10]} the step is "
                    f"{self.step_change:+.1%} of a {total} drift (gradual, or noise)")
        if self.finding is Finding.UNTESTABLE:
            return (f"the step is somewhere in {', '.join(c[:10] for c in self.skipped)} (every one skipped), "
                    f"after {self.last_good[:10]}")
        return f"the bad commit {self.commits[-1][:10]} could not be measured"


def _pick(lo: int, hi: int, skipped: set) -> int | None:
    """The middle of (lo, hi), or the nearest untried neighbour of it when skipped; None if all are."""
    mid = (lo + hi) // 2
    for offset in range(hi - lo):
        for i in (mid + offset, mid - offset):
            if lo < i < hi and i not in skipped:
                return i
    return None


def search(commits: list, change_of, threshold: float) -> Result:
    """``commits``: good first, bad last (first-parent order). ``change_of(commit)``: its change
    against good, or None to skip it. At most ceil(log2(len(commits) - 1)) + 1 calls without skips."""
    result = Result(Finding.UNMEASURED, list(commits))
    total = change_of(commits[-1])
    result.steps.append(Step(commits[-1], total, True if total is not None else None))
    if total is None:
        return result
    result.total = total
    if total < threshold:
        result.finding = Finding.NO_DRIFT
        return result
    changes, skipped = {0: 0.0, len(commits) - 1: total}, set()
    lo, hi = 0, len(commits) - 1
    while hi - lo > 1:
        i = _pick(lo, hi, skipped)
        if i is None:
            break
        change = change_of(commits[i])
        step = Step(commits[i], change)
        result.steps.append(step)
        if change is None:
            skipped.add(i)
            continue
        changes[i] = change
        step.bad = change >= total / 2
        lo, hi = (lo, i) if step.bad else (i, hi)
    result.last_good, result.culprit = commits[lo], commits[hi]
    result.step_change = changes[hi] - changes[lo]
    result.skipped = [commits[i] for i in sorted(skipped) if lo < i < hi]
    if result.skipped:
        result.finding = Finding.UNTESTABLE
    elif (result.step_change >= threshold and abs(changes[lo]) < threshold / 2
          and abs(total - changes[hi]) < threshold / 2):
        result.finding = Finding.CULPRIT
    else:
        result.finding = Finding.GRADUAL
    return result
