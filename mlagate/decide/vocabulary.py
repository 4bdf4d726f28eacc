"""The verdict's vocabulary: a case's status, the whole outcome, and the notes (reasons, warnings,
errors) whose kind code acts on and whose text people read."""

import enum
import math
from dataclasses import dataclass

from mlagate import exits


class Status(enum.StrEnum):
    """One case's verdict; the value is the string verdict.json and the report show."""
    PASS = "pass"
    REGRESSION = "regression"
    ERROR = "error"
    NO_BASELINE = "no_baseline"  # new in head (or base's result failed): only the vendor rules judge it
    REMOVED = "removed"  # in base, not in head
    SKIPPED = "skipped"  # skipped in head, and base has no result to compare
    ACCEPTED = "accepted"  # a regression within the base's perf-accept.yml entry for this commit
    UNSURE = "unsure"  # the re-measure's interval still held the threshold when its budget ran out


class Outcome(enum.StrEnum):
    """The whole verdict: an error outweighs a regression, which outweighs an unsure case that fails closed
    (gate.confirm.unsure: fail), which outweighs a pass."""
    PASS = "pass"
    REGRESSION = "regression"
    UNSURE = "unsure"
    ERROR = "error"


# The gate's exit code per outcome; the codes themselves are mlagate/exits.py's. Exit 1 is a regression and
# nothing else: a case the gate could not decide is exit 2, as any other "could not decide" is.
EXIT_CODE = {Outcome.PASS: exits.OK, Outcome.REGRESSION: exits.REGRESSION, Outcome.UNSURE: exits.ERROR,
             Outcome.ERROR: exits.ERROR}


class Kind(enum.StrEnum):
    """What a note says, for code to act on; its text is for people."""
    # reasons: why a case fails or is an error
    NO_SAMPLES = "no_samples"
    BAD_SAMPLES = "bad_samples"
    TOO_FEW_SAMPLES = "too_few_samples"
    LATENCY = "latency"  # slower than base past the screen
    NO_RATIO = "no_ratio"  # the head results lack a vendor ratio the rules need
    BAD_RATIO = "bad_ratio"
    BELOW_FLOOR = "below_floor"
    RATIO_DROP = "ratio_drop"
    FAILED_IN_HEAD = "failed_in_head"
    SKIPPED_IN_HEAD = "skipped_in_head"
    MISSING_IN_HEAD = "missing_in_head"  # in base, absent from head, still listed in perf.yml
    BAD_REMEASURE = "bad_remeasure"
    NO_GATED_CASES = "no_gated_cases"  # a verdict error
    UNSURE = "unsure"  # the re-measure ran out of rounds or time with the threshold inside its interval
    NOT_ACCEPTED = "not_accepted"  # an acceptance names the case but does not cover it (too narrow, or PR-only)
    # warnings: reported, never a failure by themselves
    NO_VENDOR_KERNEL = "no_vendor_kernel"  # gated on latency alone
    KNOWN_GAP = "known_gap"  # below the floor, as base already was
    VENDOR_CHANGED = "vendor_changed"  # base and head ran different vendor kernels: the ratio is re-baselined
    DRIFT = "drift"
    NOT_CONFIRMED = "not_confirmed"  # the interleaved re-measure cleared a flagged case
    NO_REMEASURE = "no_remeasure"  # re-measures were made, none for this case
    UNDER_THRESHOLD = "under_threshold"  # past the screen, under the threshold, not re-measured
    UNDER_POWERED = "under_powered"  # the smallest slowdown its samples could show is above the threshold
    UNSURE_PASSED = "unsure_passed"  # unsure, and perf.yml's gate.confirm.unsure is pass
    REMOVED = "removed"
    NO_BASE = "no_base"  # a new case, or base's result is not ok
    ACCEPTED = "accepted"  # the base's perf-accept.yml accepts this regression
    # verdict warnings, added by the gate pipeline
    UNCONFIRMED = "unconfirmed"  # cases were flagged and the gate ran without --confirm
    NO_BUILD_REPORT = "no_build_report"  # base has a build report, head has none
    UNREADABLE_RESULTS = "unreadable_results"  # of commits other than base and head
    UNLOCKED_CLOCKS = "unlocked_clocks"  # a side's GPU clocks were not locked (or not read) while it was recorded
    GPU_OUTLIER = "gpu_outlier"  # a side was recorded on GPUs that did not read alike
    ACCEPT_UNREAD = "accept_unread"  # a side's perf-accept.yml could not be read (its commit is not in the clone)


@dataclass(frozen=True)
class Note:
    """A reason, warning or error: its kind decides, its text explains."""
    kind: Kind
    text: str

    def __str__(self) -> str:
        return self.text


def positive(values) -> bool:
    """Every value a finite number > 0 (times, ratios): NaN would pass every comparison of the rules."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in values)


def fail(cv, kind: Kind, text: str, status: Status | None = None):
    """A reason against a case (verdict.CaseVerdict), and its status where the reason decides it."""
    cv.reasons.append(Note(kind, text))
    if status is not None:
        cv.status = status


def warn(cv, kind: Kind, text: str):
    """A warning on a case: shown, never failing it."""
    cv.warnings.append(Note(kind, text))
